"""After training: a checkpoint back as a model (load.py: gpucore.load), one evaluation pass through the
engine (evaluation_pass.py), gpucore.evaluate and the run report (evaluate.py), predictions on new inputs
(predict.py) and export to ONNX and safetensors (export.py)."""
