"""Shared fixtures of the Python module's tests: the CLI and the source tree (from CTest's environment), a tiny
`vision synth` dataset, and the bundled model."""
import os
import subprocess
from pathlib import Path

import pytest

SOURCE_DIR = Path(os.environ.get("VISION_SOURCE_DIR", Path(__file__).resolve().parents[2]))
CLI = os.environ.get("VISION_CLI", str(SOURCE_DIR / "build" / "apps" / "vision" / "vision"))
MODEL = SOURCE_DIR / "assets" / "yolo26n_synth.safetensors"
SAMPLES = SOURCE_DIR / "assets" / "samples" / "images"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, check=False)


@pytest.fixture(scope="session")
def shapes(tmp_path_factory) -> Path:
    """A `vision synth` dataset of 64-px images: 8 train, 4 val."""
    out = tmp_path_factory.mktemp("shapes")
    r = run_cli("synth", "--out", str(out), "--train", "8", "--val", "4", "--imgsz", "64", "--seed", "7")
    assert r.returncode == 0, r.stdout + r.stderr
    return out


# Training without augmentation on the CPU: two batches an epoch, a step each batch.
TINY_TRAIN = dict(imgsz=64, batch=4, nbs=4, device="cpu", optimizer="AdamW", lr0=0.01, warmup_epochs=0.0, mosaic=0.0,
                  fliplr=0.0, scale_aug=0.0, translate=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, workers=2,
                  close_mosaic=0, verbose=False, progress=False)
