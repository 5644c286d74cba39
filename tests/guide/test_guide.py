#!/usr/bin/env python3
"""The user's guide is runnable: every ```sh and ```python block of docs/guide.md runs, in order, in one empty folder
holding a copy of assets/ and a stand-in for the user's ultralytics checkpoint (yolo26n.pt: the YOLO26n fixture with
random weights), with the build's `vision` on PATH and its Python module on PYTHONPATH. A block that fails fails the
test, with its output.

  VISION_SOURCE_DIR=. VISION_BUILD_DIR=build tests/guide/test_guide.py
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile


def main() -> int:
    source = pathlib.Path(os.environ["VISION_SOURCE_DIR"]).resolve()
    build = pathlib.Path(os.environ["VISION_BUILD_DIR"]).resolve()
    python = os.environ.get("VISION_PYTHON", sys.executable)
    text = (source / "docs" / "guide.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```(sh|python)\n(.*?)^```", text, re.M | re.S)
    if len(blocks) < 8:
        print(f"test_guide: only {len(blocks)} runnable blocks in docs/guide.md")
        return 1
    with tempfile.TemporaryDirectory(prefix="vision-guide-") as d:
        work = pathlib.Path(d)
        shutil.copytree(source / "assets", work / "assets")
        shutil.copy(source / "tests" / "fixtures" / "yolo26n_random.pt", work / "yolo26n.pt")
        env = dict(os.environ, PATH=f"{build / 'apps' / 'vision'}:{os.environ.get('PATH', '')}",
                   PYTHONPATH=str(build / "python"), VISION_BUILD_DIR=str(build), VISION_SOURCE_DIR=str(source))
        for i, (lang, code) in enumerate(blocks, 1):
            command = ["bash", "-euo", "pipefail", "-c", code] if lang == "sh" else [python, "-c", code]
            r = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, check=False)
            print(f"--- block {i} ({lang}): exit {r.returncode}\n{code}{r.stdout[-3000:]}{r.stderr[-3000:]}")
            if r.returncode != 0:
                print(f"test_guide: block {i} of docs/guide.md failed")
                return 1
    print(f"test_guide: all {len(blocks)} blocks ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
