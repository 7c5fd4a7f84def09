"""Training: a run built from its config (run_setup.py: the process, then the set-up steps data (setup_data.py; its
data sets' plans and batches are data/plan.py and data/epoch_data.py) -> model (setup_model.py) -> engine
(engine_config.py, also the C++ engine's settings), then the run directory), the epoch
loop (fit_loop.py) with the run's position (position.py), its validation loop (validation_loop.py), callbacks
(callbacks.py), checkpoints (checkpointing.py, step_checkpoints.py) and training_stats.json (run_stats.py), the
run directory's files (run_dir.py), the out-of-memory retry (oom.py), the first batch's diagnosis
(first_batch.py), random states (rng.py), the progress bar (progress.py) and data-parallel processes
(distributed.py). gpucore.train (train.py, one folder up) puts them together."""
