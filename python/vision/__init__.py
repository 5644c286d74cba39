"""vision-cpp from Python: YOLO26 detection, training, validation and export, in ultralytics' style.

    from vision import YOLO
    model = YOLO("assets/yolo26n_synth.safetensors")      # weights: safetensors, a training checkpoint or a .pt
    results = model.predict("assets/samples/images", conf=0.25)
    r = results[0]; r.boxes.xyxy, r.boxes.conf, r.boxes.cls; r.names; r.plot(); r.save("out.jpg")
    model.train(data="shapes/data.yaml", epochs=30, imgsz=320, batch=32)
    metrics = model.val(data="shapes/data.yaml"); metrics.box.map, metrics.box.map50
    model.export(format="safetensors", half=True)

Images are H×W×3 uint8 arrays in RGB order (pass bgr=True for OpenCV's BGR). The engine (vision._vision) releases the
GIL while it works; its errors are raised as vision.Error with the engine's message, of a subclass by kind:
ArgumentError (also a ValueError), InputError (a bad file), DeviceError, OutOfMemoryError (also a MemoryError),
InternalError. See docs/python.md.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from ._vision import (ArgumentError, DeviceError, Error, InputError, InternalError, OutOfMemoryError,
                      __version__, cuda_available, cuda_build, model_info, onnx_max_opset, read_image,
                      train_arguments, write_image)
from . import _vision

__all__ = ["YOLO", "Results", "Boxes", "DetMetrics", "Error", "ArgumentError", "InputError", "DeviceError",
           "OutOfMemoryError", "InternalError", "read_image", "write_image", "train_arguments",
           "__version__", "cuda_build", "cuda_available", "onnx_max_opset"]

_FRESH = re.compile(r"^yolo26([nsmlx])\.yaml$")


class Boxes:
    """The detections of one image: `data` is an N×6 float32 array (x1, y1, x2, y2, conf, cls), boxes in pixels, or
    N×7 with the track id after the box (x1, y1, x2, y2, id, conf, cls) for tracked boxes, as ultralytics has it."""

    def __init__(self, data: np.ndarray, orig_shape: tuple[int, int]):
        self.data = data
        self.orig_shape = orig_shape  # height, width

    def __len__(self) -> int:
        return len(self.data)

    @property
    def xyxy(self) -> np.ndarray:
        return self.data[:, :4]

    @property
    def conf(self) -> np.ndarray:
        return self.data[:, -2]

    @property
    def cls(self) -> np.ndarray:
        return self.data[:, -1]

    @property
    def is_track(self) -> bool:
        return self.data.shape[1] == 7

    @property
    def id(self) -> np.ndarray | None:
        """The track ids (tracked boxes), else None."""
        return self.data[:, 4] if self.is_track else None

    @property
    def xywh(self) -> np.ndarray:
        b = self.xyxy
        return np.stack([(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2, b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], 1)

    @property
    def xyxyn(self) -> np.ndarray:
        h, w = self.orig_shape
        return self.xyxy / np.array([w, h, w, h], dtype=np.float32)

    @property
    def xywhn(self) -> np.ndarray:
        h, w = self.orig_shape
        return self.xywh / np.array([w, h, w, h], dtype=np.float32)


class Results:
    """One image's detections: orig_img (RGB array), path, names ({class: name}), boxes, speed (ms)."""

    def __init__(self, orig_img: np.ndarray, path: str, names: dict[int, str], detections: np.ndarray,
                 speed: dict[str, float]):
        self.orig_img = orig_img
        self.orig_shape = tuple(orig_img.shape[:2])
        self.path = path
        self.names = names
        self.boxes = Boxes(detections, self.orig_shape)
        self.speed = speed
        self.frame = None  # a video's frame index
        self.timestamp = None  # its time in seconds

    def __len__(self) -> int:
        return len(self.boxes)

    def plot(self, line_width: int | None = None, labels: bool = True) -> np.ndarray:
        """A copy of the image (RGB) with the boxes drawn in their class colours and labelled with name and score."""
        names = [self.names.get(i, str(i)) for i in range(max(self.names, default=-1) + 1)]
        data = self.boxes.data
        if self.boxes.is_track:  # labelled "id:N name", a colour per id
            ids = data[:, 4].astype(int)
            names = [""] * (int(ids.max(initial=0)) + 1)
            for i, c in zip(ids, data[:, 6].astype(int)):
                names[i] = f"id:{i} {self.names.get(c, str(c))}"
            data = np.concatenate([data[:, :4], data[:, 5:6], data[:, 4:5]], 1)
        return _vision.draw_detections(self.orig_img, data, names, line_width or 0, labels)

    def save(self, filename: str | os.PathLike | None = None, **plot_args) -> str:
        """Writes plot() to `filename` (JPEG or PNG by its suffix; default: results_<image name>)."""
        filename = str(filename or f"results_{Path(self.path).stem or 'image'}.jpg")
        write_image(self.plot(**plot_args), filename)
        return filename

    def summary(self) -> list[dict]:
        return [{"name": self.names.get(int(c), str(int(c))), "class": int(c), "confidence": float(s),
                 "box": {"x1": float(b[0]), "y1": float(b[1]), "x2": float(b[2]), "y2": float(b[3])}}
                for b, s, c in zip(self.boxes.xyxy, self.boxes.conf, self.boxes.cls)]

    def __repr__(self) -> str:
        return f"Results({self.path!r}, {len(self)} detections)"


class _Metric:
    """ultralytics' metrics.box: mp, mr, map50, map, maps (each class's mAP50-95), fitness."""

    def __init__(self, d: dict, nc: int):
        self.mp, self.mr, self.map50, self.map = d["mp"], d["mr"], d["map50"], d["map"]
        self.fitness = d["fitness"]
        self.maps = np.full(nc, self.map)
        self.ap_class_index = np.array([c["cls"] for c in d["classes"]], dtype=np.int64)
        for c in d["classes"]:
            if 0 <= c["cls"] < nc:
                self.maps[c["cls"]] = c["ap"]
        self.classes = d["classes"]

    def mean_results(self) -> list[float]:
        return [self.mp, self.mr, self.map50, self.map]


class DetMetrics:
    """The result of val (and of train: the best weights'): .box (mp, mr, map50, map, maps), .results_dict, .fitness."""

    def __init__(self, d: dict, names: Sequence[str]):
        self.names = dict(enumerate(names))
        self.box = _Metric(d, len(names))
        self.fitness = d["fitness"]
        self.table = d.get("table", "")
        self.speed = {"total_s": d.get("seconds", 0.0)}

    @property
    def results_dict(self) -> dict[str, float]:
        return {"metrics/precision(B)": self.box.mp, "metrics/recall(B)": self.box.mr,
                "metrics/mAP50(B)": self.box.map50, "metrics/mAP50-95(B)": self.box.map, "fitness": self.fitness}

    def __repr__(self) -> str:
        return f"DetMetrics(mAP50={self.box.map50:.4f}, mAP50-95={self.box.map:.4f})"


def _chain_end(iterable):
    """The items of iterable, then None."""
    yield from iterable
    yield None


def _sources(source) -> list:
    """(path or None, array or None) per image of a source: a path, a folder, a glob, an array, or a list of them."""
    if isinstance(source, np.ndarray):
        return [(None, source)]
    if isinstance(source, (str, os.PathLike)):
        return [(str(p), None) for p in _vision.expand_image_source(str(source))]
    if isinstance(source, (list, tuple)):
        out = []
        for s in source:
            out += _sources(s)
        return out
    raise ArgumentError(f"predict: source of type {type(source).__name__} is not a path, a folder, a glob, an array or a list")


class YOLO:
    """A YOLO26 model: a weights file (safetensors checkpoint or exported model, or an ultralytics .pt), or
    "yolo26n.yaml" (n, s, m, l, x) for fresh weights to train."""

    def __init__(self, model: str | os.PathLike = "yolo26n.yaml", task: str = "detect"):
        if task != "detect":
            raise ArgumentError(f"task '{task}': vision-cpp runs YOLO26 detection only")
        self.model = str(model)
        fresh = _FRESH.match(Path(self.model).name)
        self.scale = fresh.group(1) if fresh else None
        self.info = None
        if not fresh:
            if not os.path.isfile(self.model):
                raise ArgumentError(f"YOLO: {self.model} does not exist (a weights file, or yolo26n.yaml … yolo26x.yaml for "
                            f"fresh weights)")
            self.info = model_info(self.model)
            self.scale = self.info["scale"]
        self._detector = None
        self._detector_key = None
        self.metrics = None

    @property
    def names(self) -> dict[int, str]:
        return dict(enumerate(self.info["names"])) if self.info else {}

    def _get_detector(self, device, dtype, imgsz, conf, iou, max_det, classes, nms, threads=0):
        if self.info is None:
            raise ArgumentError(f"{self.model} has no weights yet: train it, or load a weights file")
        if isinstance(imgsz, int):
            imgsz = (imgsz, imgsz)
        key = (device, dtype, tuple(imgsz) if imgsz else None, conf, iou, max_det, tuple(classes or ()), nms, threads)
        if self._detector is None or self._detector_key != key:
            self._detector = None
            self._detector = _vision.Detector(self.model, device=device, dtype=dtype, imgsz=imgsz, conf=conf,
                                              max_det=max_det, classes=list(classes or []), nms=nms, iou=iou,
                                              threads=int(threads))
            self._detector_key = key
        return self._detector

    def predict(self, source=None, *, stream: bool = False, conf: float = 0.25, iou: float = 0.7, imgsz=None,
                device: str = "auto", half: bool | None = None, max_det: int = 300, classes=None,
                nms: bool = False, batch: int = 16, bgr: bool = False, save: bool = False,
                project: str = "runs/detect", name: str = "predict", verbose: bool = False, vid_stride: int = 1,
                threads: int = 0):
        """Detections of each image of `source` (a file, a folder, a glob, an H×W×3 uint8 array, or a list of them)
        as a list of Results (a generator with stream=True); a video file or stream URL gives a Results per frame
        (every vid_stride-th; Results.frame its index; save=True writes the annotated video). half: True f16, False f32, None the engine's default
        (f16 on CUDA, f32 on the CPU). threads: the CPU threads per call (0: every core)."""
        if source is None:
            raise ArgumentError("predict: give a source (an image file, a folder, a glob or an array)")
        dtype = None if half is None else ("f16" if half else "f32")
        detector = self._get_detector(device, dtype, imgsz, conf, iou, max_det, classes, nms, threads)
        if isinstance(source, (str, os.PathLike)) and _vision.is_video_source(str(source)):
            out_dir = None
            if save:
                out_dir = Path(project) / name
                out_dir.mkdir(parents=True, exist_ok=True)
            gen = self._predict_video(detector, str(source), max(int(batch), 1), max(int(vid_stride), 1), out_dir,
                                      verbose)
            return gen if stream else list(gen)
        items = _sources(source)
        out_dir = None
        if save:
            out_dir = Path(project) / name
            out_dir.mkdir(parents=True, exist_ok=True)
        gen = self._predict_batches(detector, items, max(int(batch), 1), bgr, out_dir, verbose)
        return gen if stream else list(gen)

    __call__ = predict

    def track(self, source=None, *, persist: bool = False, tracker: str = "bytetrack", conf: float = 0.1,
              frame_rate: float = 30.0, stream: bool = False, **predict_args):
        """Tracks objects through the frames of `source` (in order: a folder or glob of frames, a list of arrays) with
        ByteTrack or BoT-SORT: Results whose boxes carry track ids (boxes.id; boxes.data N×7: x1, y1, x2, y2, id, conf,
        cls). persist=True keeps the tracker of the previous call (frames fed one call at a time); tracker: "bytetrack",
        "botsort" (camera-motion compensation from the frames) or a tracker YAML in ultralytics' format. conf defaults
        to 0.1, as ultralytics' track, for the second association."""
        if not persist or getattr(self, "_tracker", None) is None or self._tracker_key != (tracker, frame_rate):
            self._tracker = _vision.ByteTracker(str(tracker), float(frame_rate))
            self._tracker_key = (tracker, frame_rate)
        gen = self._track(self.predict(source, stream=True, conf=conf, **predict_args))
        return gen if stream else list(gen)

    def _track(self, results) -> Iterator[Results]:
        for r in results:
            frame = np.ascontiguousarray(r.orig_img) if self._tracker.uses_frames else None
            t = self._tracker.update(r.boxes.data, frame)
            r.boxes = Boxes(np.ascontiguousarray(t[:, :7]), r.orig_shape)
            yield r

    def _predict_video(self, detector, source, batch, stride, out_dir, verbose) -> Iterator[Results]:
        names = dict(enumerate(detector.names))
        reader = _vision.VideoReader(source, stride=stride)
        info = reader.info
        writer = None
        frames = []
        try:
            for item in _chain_end(reader):
                if item is not None:
                    frames.append(item)
                if frames and (len(frames) == batch or item is None):
                    found = detector.detect([f[2] for f in frames])
                    t = detector.timing()
                    speed = {k: v / len(frames) for k, v in t.items()}
                    for (index, timestamp, img), dets in zip(frames, found):
                        r = Results(img, source, names, dets, speed)
                        r.frame, r.timestamp = index, timestamp
                        if out_dir is not None:
                            plotted = r.plot()
                            h, w = plotted.shape[0] // 2 * 2, plotted.shape[1] // 2 * 2
                            if writer is None:
                                writer = _vision.VideoWriter(str(out_dir / (Path(source).stem or "stream")) + ".mp4",
                                                             w, h, (info["fps"] or 30.0) / stride)
                            writer.write(np.ascontiguousarray(plotted[:h, :w]))
                        if verbose:
                            print(f"{source} frame {index}: {len(r)} detections, {t['inference'] / len(frames):.1f}ms")
                        yield r
                    frames = []
        finally:
            if writer is not None:
                writer.close()

    def _predict_batches(self, detector, items, batch, bgr, out_dir, verbose) -> Iterator[Results]:
        names = dict(enumerate(detector.names))
        # The files are decoded on worker threads ahead of the model (in order, with bounded memory).
        paths = [p for p, _ in items if p is not None]
        reader = _vision.ImageReader(paths, window=2 * batch) if paths else None
        for start in range(0, len(items), batch):
            chunk = items[start:start + batch]
            images = []
            for path, array in chunk:
                if array is None:
                    images.append(next(reader)[1])
                else:
                    # A uint8 array whose rows are not packed (a channel slice, a transposed view) is packed; any other
                    # dtype or shape goes to the engine as it is, which names what it expects.
                    a = np.asarray(array)
                    if a.dtype == np.uint8 and a.ndim == 3 and a.shape[2] == 3 and (a.strides[2] != 1 or a.strides[1] != 3):
                        a = np.ascontiguousarray(a)
                    images.append(a)
            # Arrays the engine decoded are RGB; the caller's are in the order `bgr` says.
            rgb = [i for i, (p, _) in enumerate(chunk) if p is not None]
            caller = [i for i, (p, _) in enumerate(chunk) if p is None]
            found = [None] * len(chunk)
            for group, order in ((rgb, False), (caller, bgr)):
                if group:
                    for i, d in zip(group, detector.detect([images[i] for i in group], bgr=order)):
                        found[i] = d
            t = detector.timing()
            speed = {k: v / len(chunk) for k, v in t.items()}
            for i, (path, array) in enumerate(chunk):
                img = images[i]
                if path is None and bgr:
                    img = np.ascontiguousarray(img[:, :, ::-1])  # Results hold RGB
                r = Results(img, path or f"image{start + i}", names, found[i], speed)
                if out_dir is not None:
                    r.save(out_dir / (Path(r.path).stem + ".jpg"))
                if verbose:
                    counts = {}
                    for c in r.boxes.cls.astype(int):
                        counts[names.get(c, str(c))] = counts.get(names.get(c, str(c)), 0) + 1
                    print(f"image {start + i + 1}/{len(items)} {r.path}: {r.orig_shape[0]}x{r.orig_shape[1]} "
                          + (", ".join(f"{n} {k}" for k, n in counts.items()) or "(no detections)")
                          + f", {t['inference'] / len(chunk):.1f}ms")
                yield r

    def train(self, data: str | None = None, *, on_batch: Callable[[dict], bool | None] | None = None,
              on_epoch: Callable[[dict], bool | None] | None = None, **kwargs) -> DetMetrics | None:
        """Trains (the library's run: vision::run_training) from this model's weights, or fresh ones for
        yolo26X.yaml; the keywords are vision.train_arguments()'s (epochs, imgsz, batch, lr0, device, …, resume).
        on_batch / on_epoch get a dict after each batch / epoch and stop the run by returning False. Ctrl-C finishes
        the batch, saves `last` and raises KeyboardInterrupt. Afterwards the model holds the best weights; returns their
        metrics (None without validation)."""
        args = dict(kwargs)
        if data is not None:
            args["data"] = str(data)
        if not args.get("resume"):
            args.setdefault("scale", self.scale)
            if self.info is not None:
                args.setdefault("weights", self.model)
        for k in ("project", "name", "weights", "data", "device", "dtype", "optimizer"):
            if k in args and isinstance(args[k], os.PathLike):
                args[k] = str(args[k])
        if isinstance(args.get("cache"), bool):  # ultralytics' cache=True is the ram cache
            args["cache"] = "ram" if args["cache"] else "none"
        result = _vision.train(args, on_batch, on_epoch)
        self.train_result = result
        if os.path.isfile(result["best"]):
            self.model = str(result["best"])
            self.info = model_info(self.model)
            self._detector = None
        if result["metrics"] is None:
            self.metrics = None
        else:
            self.metrics = DetMetrics(result["metrics"], self.info["names"])
        return self.metrics

    def val(self, data: str, *, split: str = "val", imgsz: int | None = None, batch: int = 16, conf: float = 0.001,
            iou: float = 0.7, max_det: int = 300, nms: bool = False, device: str = "auto", half: bool | None = None,
            save_json: str | None = None, plots: str | None = None, workers: int = 0,
            verbose: bool = True, threads: int = 0) -> DetMetrics:
        """mAP50, mAP50-95, P and R of the model on a dataset split (vision::run_validation)."""
        if self.info is None:
            raise ArgumentError(f"{self.model} has no weights yet: train it, or load a weights file")
        dtype = "" if half is None else ("f16" if half else "f32")
        d = _vision.val(self.model, str(data), split=split, imgsz=imgsz or 0, batch=batch, conf=conf, iou=iou,
                        max_det=max_det, nms=nms, device=device, dtype=dtype, save_json=str(save_json or ""),
                        plots=str(plots or ""), workers=workers, verbose=verbose, threads=threads)
        self.metrics = DetMetrics(d, d["names"])
        return self.metrics

    def export(self, format: str = "safetensors", *, half: bool | None = None, file: str | os.PathLike | None = None,
               dynamic: bool = False, end2end: bool = True, opset: int | None = None, imgsz=None, batch: int = 1,
               max_det: int = 300) -> str:
        """Exports this model; returns the written file's path (next to the model unless `file` is given).
        format "safetensors": the fused inference model (BatchNorm folded, the one-to-one head), f16 unless half=False,
        as <stem>_<dtype>.safetensors. format "onnx": <stem>.onnx with the end-to-end output [B, K, 6] (end2end=False:
        the one-to-many head's raw [B, 4 + nc, anchors]), f32 unless half=True, at imgsz (the model's by default) and
        batch, or with dynamic=True a symbolic batch, height and width; opset 17 by default."""
        if self.info is None:
            raise ArgumentError(f"{self.model} has no weights yet: train it, or load a weights file")
        stem = Path(self.model).stem
        if format == "onnx":
            if isinstance(imgsz, int):
                imgsz = (imgsz, imgsz)
            out = str(file) if file else str(Path(self.model).with_name(f"{stem}.onnx"))
            d = _vision.export_onnx(self.model, out, half=bool(half), dynamic=dynamic, end2end=end2end,
                                    opset=opset or 17, imgsz=tuple(imgsz) if imgsz else (0, 0), batch=batch,
                                    max_det=max_det)
            return d["out"]
        if format != "safetensors":
            raise ArgumentError(f"export: format '{format}' is not one of safetensors, onnx")
        dtype = "f32" if half is False else "f16"
        out = str(file) if file else str(Path(self.model).with_name(f"{stem}_{dtype}.safetensors"))
        return str(_vision.export(self.model, out, dtype))

    def __repr__(self) -> str:
        return f"YOLO({self.model!r}, YOLO26{self.scale})"
