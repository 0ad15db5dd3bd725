"""The inference worker: ONNX Runtime sessions in batch mode (resumable parquet shards + a measurement
record) and serve mode (the Open Inference Protocol over HTTP, with dynamic batching and admission control).

Python API::

    from oltunes.worker import run_batch, serve_process
    report = run_batch("cnn-l-fp32.onnx", "in.npz", "out/", batch_size=64, report="out/measurement.json")
    with serve_process("cnn-l-fp32.onnx", max_batch=32) as srv:   # srv.url -> /v2 (Open Inference Protocol), /metrics, /window
        ...

CLI: ``oltunes worker batch ...`` and ``oltunes worker serve ...`` (also ``python -m oltunes.worker``).
"""

from oltunes.worker.batch import BatchReport, read_predictions, run_batch
from oltunes.worker.dataset import Dataset, read_dataset, write_dataset
from oltunes.worker.process import ServeProcess, serve_process
from oltunes.worker.session import ModelSession

__all__ = [
    "BatchReport",
    "Dataset",
    "ModelSession",
    "ServeProcess",
    "read_dataset",
    "read_predictions",
    "run_batch",
    "serve_process",
    "write_dataset",
]
