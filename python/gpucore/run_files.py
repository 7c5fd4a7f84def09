"""The names of a run directory's files, in one place: what training writes there, what resumes, the report
and gpucore evaluate read and write."""
import os

CHECKPOINTS = "checkpoints"  # the folder of the .pt files
LAST, BEST, INTERRUPTED = "last.pt", "best.pt", "interrupted.pt"
STEP = "step.pt"  # the newest mid-epoch checkpoint (checkpoint_every_n_steps, checkpoint_every_minutes)
EVERY_N_PREFIX = "epoch_"  # every-N checkpoints: epoch_NNNN.pt
RESUME_CANDIDATES = (INTERRUPTED, STEP, LAST)  # `resume: auto` takes the newest of these
REPORT_CHECKPOINTS = (BEST, LAST, INTERRUPTED)  # the report shows the first of these that exists

CONFIG = "config.json"
RUN_LOCK = ".gpucore.lock"  # locked by the process training in the run directory (its pid inside), for that run
STATS = "training_stats.json"
METRICS = "metrics.jsonl"
METRICS_CSV = "metrics.csv"  # config key loggers: csv
TENSORBOARD = "tensorboard"
MLFLOW_RUN = "mlflow_run.json"  # config key loggers: mlflow: the MLflow run this run directory logs to

REPORT = "report.html"
PLOTS = "plots"
PER_CLASS = "per_class.json"
EVALUATION = "evaluation.json"  # gpucore evaluate's summary


def labelled(name: str, label: str) -> str:
    """A report file's name for a page beside the run's own (gpucore report --data): report-LABEL.html, plots-LABEL,
    per_class-LABEL.json."""
    stem, extension = os.path.splitext(name)
    return f"{stem}-{label}{extension}"


def every_n_name(epoch: int) -> str:
    """The every-N checkpoint of epoch `epoch`; the names sort by epoch."""
    return f"{EVERY_N_PREFIX}{epoch:04d}.pt"
