// The Python module's native half, vision._vision (pybind11): the engine's detector, training run, validation and
// export, image reading, writing and drawing, and vision.Error. The Python half (python/vision/__init__.py) builds
// ultralytics' API (YOLO, Results, Boxes, metrics) on top of it.
//
// The GIL is released while the engine works; a Detector's calls are serialised by its own mutex, so Python threads
// may share one. Images cross as numpy arrays: an H×W×3 uint8 array whose pixels are contiguous within each row is
// read in place (any row stride, RGB or BGR); an image the engine decodes becomes an array without a copy.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <exception>
#include <mutex>
#include <optional>
#include <type_traits>

#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/data/annotate.h"
#include "vision/data/dataset.h"
#include "vision/data/image.h"
#include "vision/data/prefetch.h"
#include "vision/data/video.h"
#include "vision/detector.h"
#include "vision/exporter.h"
#include "vision/graph/backend.h"
#include "vision/models/yolo/ultralytics_checkpoint.h"
#include "vision/models/yolo/weights.h"
#include "vision/models/yolo/yolo26.h"
#include "vision/trainer.h"
#include "vision/track/byte_tracker.h"
#include "vision/validator.h"
#include "vision/version.h"

namespace py = pybind11;

namespace {

using namespace vision;

// An engine image as an H×W×3 uint8 array that owns it (no copy).
py::array image_array(data::Image image) {
  auto* owned = new data::Image(std::move(image));
  py::capsule free_it(owned, [](void* p) { delete static_cast<data::Image*>(p); });
  const std::vector<py::ssize_t> shape{owned->height, owned->width, owned->channels};
  const std::vector<py::ssize_t> strides{owned->width * owned->channels, owned->channels, 1};
  return py::array_t<uint8_t>(shape, strides, owned->pixels.data(), free_it);
}

// A view of an H×W×3 uint8 array's pixels (each row's contiguous; rows at any stride). The array must stay alive.
data::ImageView view_of(const py::array& a, bool bgr, size_t index) {
  const bool ok = a.dtype().is(py::dtype::of<uint8_t>()) && a.ndim() == 3 && a.shape(2) == 3 && a.strides(2) == 1 &&
                  a.strides(1) == 3 && a.strides(0) >= a.shape(1) * 3 && a.shape(0) > 0 && a.shape(1) > 0;
  if (!ok) {
    std::string shape;
    for (py::ssize_t d = 0; d < a.ndim(); ++d) shape += (d ? "×" : "") + std::to_string(a.shape(d));
    fail("image {}: an H×W×3 uint8 array with each row's pixels contiguous is expected, got a {} array of shape {} "
         "(numpy.ascontiguousarray(image, dtype=numpy.uint8) gives one)",
         index, std::string(py::str(a.dtype())), shape.empty() ? "()" : shape);
  }
  return {static_cast<const uint8_t*>(a.data()), a.shape(1), a.shape(0), a.strides(0),
          bgr ? data::ChannelOrder::bgr : data::ChannelOrder::rgb};
}

// Detections as an N×6 float32 array: x1, y1, x2, y2, score, class.
py::array_t<float> detections_array(const std::vector<data::Detection>& found) {
  py::array_t<float> out({static_cast<py::ssize_t>(found.size()), py::ssize_t{6}});
  auto m = out.mutable_unchecked<2>();
  for (size_t i = 0; i < found.size(); ++i) {
    const auto r = static_cast<py::ssize_t>(i);
    for (py::ssize_t k = 0; k < 4; ++k) m(r, k) = found[i].box[static_cast<size_t>(k)];
    m(r, 4) = found[i].score;
    m(r, 5) = static_cast<float>(found[i].cls);
  }
  return out;
}

std::vector<data::Detection> detections_from(const py::array_t<float, py::array::c_style | py::array::forcecast>& a) {
  VISION_CHECK(a.ndim() == 2 && (a.shape(1) == 6 || a.shape(0) == 0),
               "detections: an N×6 array (x1, y1, x2, y2, score, class) is expected");
  std::vector<data::Detection> out(static_cast<size_t>(a.shape(0)));
  auto m = a.unchecked<2>();
  for (size_t i = 0; i < out.size(); ++i) {
    const auto r = static_cast<py::ssize_t>(i);
    out[i].box = {m(r, 0), m(r, 1), m(r, 2), m(r, 3)};
    out[i].score = m(r, 4);
    out[i].cls = static_cast<int64_t>(m(r, 5));
  }
  return out;
}

py::dict metrics_dict(const eval::MetricsResult& m, const std::vector<std::string>& names) {
  py::list classes;
  for (const eval::ClassMetrics& c : m.classes) {
    py::dict d;
    d["cls"] = c.cls;
    d["name"] = c.cls >= 0 && static_cast<size_t>(c.cls) < names.size() ? names[static_cast<size_t>(c.cls)] : "";
    d["images"] = c.images, d["instances"] = c.instances;
    d["precision"] = c.precision, d["recall"] = c.recall, d["ap50"] = c.ap50, d["ap"] = c.ap;
    classes.append(d);
  }
  py::dict d;
  d["mp"] = m.mp, d["mr"] = m.mr, d["map50"] = m.map50, d["map"] = m.map, d["fitness"] = m.fitness;
  d["images"] = m.images, d["instances"] = m.instances, d["classes"] = classes;
  return d;
}

// A Detector with the mutex that serialises its calls from Python threads.
struct PyDetector {
  std::unique_ptr<Detector> detector;
  std::mutex mu;
};

DetectorOptions detector_options(const std::string& device, const std::optional<std::string>& dtype,
                                 const std::optional<std::array<int64_t, 2>>& imgsz, float conf, int64_t max_det,
                                 const std::vector<int64_t>& classes, bool nms, float iou, int threads) {
  DetectorOptions o;
  o.device = device;
  if (dtype) o.dtype = core::parse_dtype(*dtype);
  o.imgsz = imgsz;
  o.conf = conf, o.max_det = max_det, o.classes = classes, o.nms = nms, o.iou = iou, o.threads = threads;
  return o;
}

// TrainConfig from keyword arguments: each key must name a field, of its type.
TrainConfig train_config_from(const py::dict& kwargs) {
  TrainConfig c;
  std::vector<std::string> known;
  visit_train_config(c, [&](auto& value, const TrainField& f) {
    known.emplace_back(f.name);
    if (!kwargs.contains(f.name)) return;
    using T = std::remove_reference_t<decltype(value)>;
    const py::handle v = kwargs[f.name];
    try {
      if constexpr (std::is_same_v<T, bool>) {
        VISION_CHECK(py::isinstance<py::bool_>(v), "train: {}={} must be True or False", f.name,
                     std::string(py::repr(v)));
      } else if constexpr (std::is_integral_v<T>) {
        VISION_CHECK(py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v), "train: {}={} must be an integer",
                     f.name, std::string(py::repr(v)));
      }
      value = v.cast<T>();
    } catch (const py::cast_error&) {
      fail("train: {}={} is of the wrong type", f.name, std::string(py::repr(v)));
    }
  });
  for (const auto& [key, value] : kwargs) {
    const auto k = key.cast<std::string>();
    if (k == "resume") {
      if (py::isinstance<py::bool_>(value)) {
        if (value.cast<bool>()) c.resume = "";
      } else if (!value.is_none()) {
        c.resume = py::str(value).cast<std::string>();
      }
      continue;
    }
    VISION_CHECK(std::find(known.begin(), known.end(), k) != known.end(),
                 "train: unknown argument '{}' (vision.train_arguments() lists them)", k);
  }
  return c;
}

py::dict train_result_dict(const TrainResult& r) {
  py::dict d;
  d["run_dir"] = r.run_dir, d["last"] = r.last, d["best"] = r.best;
  d["epochs_done"] = r.epochs_done, d["best_epoch"] = r.best_epoch, d["best_fitness"] = r.best_fitness;
  d["interrupted"] = r.interrupted, d["stopped_early"] = r.stopped_early, d["message"] = r.message;
  d["metrics"] = r.best_metrics ? py::object(metrics_dict(*r.best_metrics, r.names)) : py::none();
  return d;
}

}  // namespace

PYBIND11_MODULE(_vision, m) {
  m.doc() = "vision-cpp's engine (the native half of the vision package)";
  m.attr("__version__") = std::string(vision::kVersion);
#ifdef VISION_HAS_CUDA
  m.attr("cuda_build") = true;
#else
  m.attr("cuda_build") = false;
#endif
#ifdef VISION_HAS_VIDEO
  m.attr("video_build") = true;
#else
  m.attr("video_build") = false;
#endif
  // vision.Error carries the engine's message (vision::Error); its subclass says the error's kind. Other C++
  // exceptions become RuntimeError.
  static py::object error_classes[5];
  const py::object base = py::reinterpret_steal<py::object>(PyErr_NewException("vision.Error", PyExc_Exception, nullptr));
  m.attr("Error") = base;
  const auto subclass = [&](ErrorKind kind, const char* name, PyObject* also) {
    const py::tuple bases = also ? py::make_tuple(base, py::handle(also)) : py::make_tuple(base);
    py::object c = py::reinterpret_steal<py::object>(
        PyErr_NewException((std::string("vision.") + name).c_str(), bases.ptr(), nullptr));
    m.attr(name) = c;
    error_classes[static_cast<int>(kind)] = c;
  };
  subclass(ErrorKind::argument, "ArgumentError", PyExc_ValueError);
  subclass(ErrorKind::input, "InputError", nullptr);
  subclass(ErrorKind::device, "DeviceError", PyExc_RuntimeError);
  subclass(ErrorKind::out_of_memory, "OutOfMemoryError", PyExc_MemoryError);
  subclass(ErrorKind::internal, "InternalError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const vision::Error& e) {
      PyErr_SetString(error_classes[static_cast<int>(e.kind())].ptr(), e.what());
    }
  });

  py::class_<PyDetector>(m, "Detector")
      .def(py::init([](const std::filesystem::path& model, const std::string& device,
                       const std::optional<std::string>& dtype, const std::optional<std::array<int64_t, 2>>& imgsz,
                       float conf, int64_t max_det, const std::vector<int64_t>& classes, bool nms, float iou,
                       int threads) {
             const DetectorOptions o = detector_options(device, dtype, imgsz, conf, max_det, classes, nms, iou, threads);
             auto d = std::make_unique<PyDetector>();
             py::gil_scoped_release release;
             d->detector = std::make_unique<Detector>(model, o);
             return d;
           }),
           py::arg("model"), py::arg("device") = "auto", py::arg("dtype") = py::none(), py::arg("imgsz") = py::none(),
           py::arg("conf") = 0.25f, py::arg("max_det") = 300, py::arg("classes") = std::vector<int64_t>{},
           py::arg("nms") = false, py::arg("iou") = 0.7f, py::arg("threads") = 0)
      .def_property_readonly("names", [](const PyDetector& d) { return d.detector->names(); })
      .def_property_readonly("device", [](const PyDetector& d) { return d.detector->device(); })
      .def_property_readonly("dtype", [](const PyDetector& d) { return std::string(core::dtype_name(d.detector->dtype())); })
      .def_property_readonly("imgsz", [](const PyDetector& d) { return d.detector->imgsz(); })
      .def_property_readonly("scale",
                             [](const PyDetector& d) { return d.detector->scale(); })
      .def(
          "detect",
          [](PyDetector& d, const std::vector<py::array>& images, bool bgr) {
            std::vector<data::ImageView> views;
            for (size_t i = 0; i < images.size(); ++i) views.push_back(view_of(images[i], bgr, i));
            std::vector<std::vector<data::Detection>> found;
            {
              py::gil_scoped_release release;
              std::lock_guard lock(d.mu);
              found = d.detector->detect(std::span<const data::ImageView>(views));
            }
            py::list out;
            for (const auto& f : found) out.append(detections_array(f));
            return out;
          },
          py::arg("images"), py::arg("bgr") = false,
          "Detections of each image (H×W×3 uint8 arrays, one batch) as N×6 float32 arrays: x1, y1, x2, y2, score, class")
      .def("timing", [](PyDetector& d) {
        std::lock_guard lock(d.mu);
        const DetectTiming& t = d.detector->last_timing();
        py::dict r;
        r["preprocess"] = t.preprocess, r["inference"] = t.inference, r["postprocess"] = t.postprocess;
        return r;
      });

  // Image files decoded on worker threads ahead of the consumer, in order, with bounded memory (data::Prefetcher, as
  // `vision predict` decodes): predict's file sources. next() gives (path, H×W×3 uint8 RGB array); an unreadable
  // file raises vision.InputError naming it.
  struct ImageReader {
    std::unique_ptr<data::Prefetcher> prefetch;
  };
  py::class_<ImageReader>(m, "ImageReader")
      .def(py::init([](const std::vector<std::filesystem::path>& paths, size_t workers, size_t window,
                       int64_t max_pixels) {
             VISION_CHECK(max_pixels >= 1, "ImageReader: max_pixels must be positive, got {}", max_pixels);
             auto r = std::make_unique<ImageReader>();
             r->prefetch = std::make_unique<data::Prefetcher>(paths, workers > 0 ? workers : data::default_decode_workers(),
                                                              std::max<size_t>(window, 1),
                                                              data::DecodeOptions{.max_pixels = max_pixels});
             return r;
           }),
           py::arg("paths"), py::arg("workers") = 0, py::arg("window") = 32,
           py::arg("max_pixels") = data::kDefaultMaxPixels)
      .def("__iter__", [](ImageReader& r) -> ImageReader& { return r; })
      .def("__next__", [](ImageReader& r) {
        if (r.prefetch->done()) throw py::stop_iteration();
        data::Loaded l;
        {
          py::gil_scoped_release release;
          l = r.prefetch->next();
        }
        if (!l.error.empty()) fail_input("{}", l.error);
        return py::make_tuple(l.path.string(), image_array(std::move(l.image)));
      });

  // ByteTrack or BoT-SORT per frame: detections N×6 (x1, y1, x2, y2, score, class), and for BoT-SORT's camera-motion
  // compensation the frame (H×W×3 uint8 RGB, or BGR with bgr=True) → tracks M×8 (x1, y1, x2, y2, id, score, class,
  // index of the detection).
  py::class_<track::ByteTracker>(m, "ByteTracker")
      .def(py::init([](const std::string& tracker, double frame_rate) {
             return track::ByteTracker(tracker == "bytetrack" ? track::ByteTrackConfig{}
                                       : tracker == "botsort" ? track::botsort_config()
                                                              : track::read_tracker_config(tracker),
                                       frame_rate);
           }),
           py::arg("tracker") = "bytetrack", py::arg("frame_rate") = 30.0)
      .def(
          "update",
          [](track::ByteTracker& t, const py::array_t<float, py::array::c_style | py::array::forcecast>& detections,
             const std::optional<py::array>& frame, bool bgr) {
            const std::vector<data::Detection> found = detections_from(detections);
            std::optional<data::Image> image;
            if (frame && t.uses_frames()) image = data::to_image(view_of(*frame, bgr, 0));
            const std::vector<track::TrackedObject> tracks = t.update(found, image ? &*image : nullptr);
            py::array_t<float> out({static_cast<py::ssize_t>(tracks.size()), py::ssize_t{8}});
            auto o = out.mutable_unchecked<2>();
            for (size_t i = 0; i < tracks.size(); ++i) {
              const auto r = static_cast<py::ssize_t>(i);
              const track::TrackedObject& k = tracks[i];
              for (py::ssize_t c = 0; c < 4; ++c) o(r, c) = k.box[static_cast<size_t>(c)];
              o(r, 4) = static_cast<float>(k.id), o(r, 5) = k.score, o(r, 6) = static_cast<float>(k.cls);
              o(r, 7) = static_cast<float>(k.detection);
            }
            return out;
          },
          py::arg("detections"), py::arg("frame") = py::none(), py::arg("bgr") = false)
      .def("reset", &track::ByteTracker::reset)
      .def_property_readonly("uses_frames", &track::ByteTracker::uses_frames)
      .def_property_readonly("frame", &track::ByteTracker::frame);
  // Video through FFmpeg: frames as (index, timestamp in s, H×W×3 RGB array); an annotated video out.
  m.def("is_video_source", &data::is_video_source, py::arg("source"),
        "Whether a source names a video file, a stream URL or a camera");
  py::class_<data::VideoReader>(m, "VideoReader")
      .def(py::init([](const std::string& source, int64_t stride, int64_t max_pixels, int reconnect,
                       double reconnect_delay) {
             py::gil_scoped_release release;
             return std::make_unique<data::VideoReader>(
                 source, data::VideoReaderOptions{.max_pixels = max_pixels,
                                                  .stride = stride,
                                                  .reconnect = reconnect,
                                                  .reconnect_delay = reconnect_delay});
           }),
           py::arg("source"), py::arg("stride") = 1, py::arg("max_pixels") = data::kDefaultMaxPixels,
           py::arg("reconnect") = 5, py::arg("reconnect_delay") = 1.0)
      .def_property_readonly("reconnects", &data::VideoReader::reconnects)
      .def_property_readonly("info",
                             [](const data::VideoReader& r) {
                               py::dict d;
                               d["width"] = r.info().width, d["height"] = r.info().height, d["fps"] = r.info().fps;
                               d["frames"] = r.info().frames, d["codec"] = r.info().codec;
                               return d;
                             })
      .def_property_readonly("warnings", &data::VideoReader::warnings)
      .def("__iter__", [](data::VideoReader& r) -> data::VideoReader& { return r; })
      .def("__next__", [](data::VideoReader& r) {
        data::VideoFrame f;
        bool more = false;
        {
          py::gil_scoped_release release;
          more = r.read(f);
        }
        if (!more) throw py::stop_iteration();
        return py::make_tuple(f.index, f.timestamp, image_array(std::move(f.image)));
      });
  py::class_<data::VideoWriter>(m, "VideoWriter")
      .def(py::init([](const std::filesystem::path& path, int64_t width, int64_t height, double fps,
                       const std::string& preset, int crf) {
             return std::make_unique<data::VideoWriter>(path, width, height, fps,
                                                        data::VideoWriterOptions{.preset = preset, .crf = crf});
           }),
           py::arg("path"), py::arg("width"), py::arg("height"), py::arg("fps"), py::arg("preset") = "veryfast",
           py::arg("crf") = 23)
      .def("write",
           [](data::VideoWriter& w, const py::array& image) {
             const data::Image im = data::to_image(view_of(image, false, 0));
             py::gil_scoped_release release;
             w.write(im);
           })
      .def("close", [](data::VideoWriter& w) {
        py::gil_scoped_release release;
        w.close();
      })
      .def_property_readonly("frames", &data::VideoWriter::frames);
  m.def("cuda_available", &graph::cuda_usable,
        "Whether this build has CUDA and a usable GPU is present (what device='auto' takes)");
  m.def("expand_image_source", &data::expand_image_source, py::arg("source"),
        "The image files a source names (a file, a folder's images, a glob's files), as vision predict expands --source");

  m.def(
      "model_info",
      [](const std::filesystem::path& model) {
        models::yolo::ModelInfo info;
        {
          py::gil_scoped_release release;
          info = models::yolo::read_model_info(models::yolo::read_model_file(model));
        }
        py::dict d;
        d["scale"] = std::string(models::yolo::scale_name(info.spec.scale));
        d["nc"] = info.spec.nc, d["names"] = info.names, d["imgsz"] = info.imgsz, d["fused"] = info.fused();
        return d;
      },
      py::arg("model"), "What a weights file holds: scale, nc, names, imgsz (height, width), fused");

  m.def(
      "read_image",
      [](const std::filesystem::path& path, int64_t max_pixels) {
        data::Image im;
        {
          py::gil_scoped_release release;
          im = data::read_image(path, {.max_pixels = max_pixels});
        }
        return image_array(std::move(im));
      },
      py::arg("path"), py::arg("max_pixels") = data::kDefaultMaxPixels,
      "An image file (JPEG or PNG) as an upright H×W×3 uint8 RGB array");
  m.def(
      "write_image",
      [](const py::array& image, const std::filesystem::path& path, bool bgr) {
        const data::Image im = data::to_image(view_of(image, bgr, 0));
        py::gil_scoped_release release;
        data::write_image(im, path);
      },
      py::arg("image"), py::arg("path"), py::arg("bgr") = false, "Writes an H×W×3 uint8 array as JPEG or PNG (by the suffix)");
  m.def(
      "draw_detections",
      [](const py::array& image, const py::array_t<float, py::array::c_style | py::array::forcecast>& detections,
         const std::vector<std::string>& names, int64_t line_width, bool labels, bool bgr) {
        data::Image im = data::to_image(view_of(image, bgr, 0));
        const std::vector<data::Detection> found = detections_from(detections);
        {
          py::gil_scoped_release release;
          data::draw_detections(im, found, names, {.line_width = line_width, .labels = labels});
        }
        return image_array(std::move(im));
      },
      py::arg("image"), py::arg("detections"), py::arg("names"), py::arg("line_width") = 0, py::arg("labels") = true,
      py::arg("bgr") = false, "A copy of the image (RGB) with the detections drawn");

  m.def(
      "train",
      [](const py::dict& kwargs, const py::object& on_batch, const py::object& on_epoch) {
        const TrainConfig config = train_config_from(kwargs);
        std::exception_ptr callback_error;
        bool signalled = false;
        TrainCallbacks cb;
        // Each batch: a pending Ctrl-C (Python's handler only sets a flag while the engine runs) stops the run, which
        // saves `last`; then KeyboardInterrupt is raised. An exception from a callback also stops it, then is raised.
        cb.on_batch = [&](const BatchReport& b) {
          py::gil_scoped_acquire gil;
          if (PyErr_CheckSignals() != 0) {
            signalled = true;
            PyErr_Clear();
            return false;
          }
          if (on_batch.is_none()) return true;
          try {
            py::dict d;
            d["epoch"] = b.epoch, d["epochs"] = b.epochs, d["batch"] = b.batch, d["batches"] = b.batches;
            d["box_loss"] = b.box, d["cls_loss"] = b.cls, d["l1_loss"] = b.l1, d["instances"] = b.instances;
            d["seconds"] = b.seconds, d["images_per_second"] = b.images_per_second, d["data_wait"] = b.data_wait;
            const py::object r = on_batch(d);
            return r.is_none() || r.cast<bool>();
          } catch (...) {
            callback_error = std::current_exception();
            return false;
          }
        };
        cb.on_epoch = [&](const EpochReport& e) {
          py::gil_scoped_acquire gil;
          if (on_epoch.is_none()) return true;
          try {
            py::dict d;
            d["epoch"] = e.epoch, d["epochs"] = e.epochs, d["box_loss"] = e.box, d["cls_loss"] = e.cls;
            d["l1_loss"] = e.l1, d["lr"] = e.lr, d["fitness"] = e.fitness, d["best"] = e.best;
            d["seconds"] = e.seconds, d["images_per_second"] = e.images_per_second, d["data_wait"] = e.data_wait;
            d["metrics"] = metrics_dict(e.metrics, e.names);
            const py::object r = on_epoch(d);
            return r.is_none() || r.cast<bool>();
          } catch (...) {
            callback_error = std::current_exception();
            return false;
          }
        };
        TrainResult result;
        {
          py::gil_scoped_release release;
          result = run_training(config, cb);
        }
        if (callback_error) std::rethrow_exception(callback_error);
        if (signalled) {
          PyErr_SetString(PyExc_KeyboardInterrupt, result.message.c_str());
          throw py::error_already_set();
        }
        return train_result_dict(result);
      },
      py::arg("kwargs"), py::arg("on_batch") = py::none(), py::arg("on_epoch") = py::none(),
      "Runs (or resumes) a training run; the keyword names are vision.train_arguments()'");

  m.def("train_arguments", [] {
    py::list out;
    const TrainConfig c;
    visit_train_config(c, [&](const auto& value, const TrainField& f) {
      if (f.hidden) return;
      out.append(py::make_tuple(f.name, py::cast(value), f.help));
    });
    out.append(py::make_tuple("resume", py::none(), "continue a run: True (project/name), its folder or its last.safetensors"));
    return out;
  });

  m.def(
      "val",
      [](const std::string& model, const std::string& data, const std::string& split, int64_t imgsz, int64_t batch,
         float conf, float iou, int64_t max_det, bool nms, const std::string& device, const std::string& dtype,
         const std::string& save_json, const std::string& plots, int64_t workers, bool verbose, int threads) {
        ValConfig c;
        c.model = model, c.data = data, c.split = split, c.imgsz = imgsz, c.batch = batch, c.conf = conf, c.iou = iou;
        c.max_det = max_det, c.nms = nms, c.device = device, c.dtype = dtype, c.save_json = save_json;
        c.plots = plots, c.workers = workers, c.verbose = verbose, c.progress = verbose, c.threads = threads;
        ValResult r;
        {
          py::gil_scoped_release release;
          r = run_validation(c);
        }
        py::dict d = metrics_dict(r.metrics, r.names);
        d["names"] = r.names, d["table"] = r.table, d["evaluated"] = r.evaluated, d["skipped"] = r.skipped;
        d["seconds"] = r.seconds;
        return d;
      },
      py::arg("model"), py::arg("data"), py::arg("split") = "val", py::arg("imgsz") = 0, py::arg("batch") = 16,
      py::arg("conf") = 0.001f, py::arg("iou") = 0.7f, py::arg("max_det") = 300, py::arg("nms") = false,
      py::arg("device") = "auto", py::arg("dtype") = "", py::arg("save_json") = "", py::arg("plots") = "",
      py::arg("workers") = 0, py::arg("verbose") = true, py::arg("threads") = 0);

  m.def(
      "export",
      [](const std::filesystem::path& model, const std::filesystem::path& out, const std::string& dtype) {
        ExportSummary s;
        {
          py::gil_scoped_release release;
          s = export_model(model, out, dtype);
        }
        return s.out;
      },
      py::arg("model"), py::arg("out"), py::arg("dtype") = "f16", "The fused inference model of a full checkpoint");
  m.def(
      "export_onnx",
      [](const std::filesystem::path& model, const std::filesystem::path& out, bool half, bool dynamic, bool end2end,
         int64_t opset, std::array<int64_t, 2> imgsz, int64_t batch, int64_t max_det) {
        ExportSummary s;
        {
          py::gil_scoped_release release;
          s = export_onnx(model, out,
                          {.half = half, .dynamic = dynamic, .end2end = end2end, .opset = opset, .imgsz = imgsz,
                           .batch = batch, .max_det = max_det});
        }
        py::dict d;
        d["out"] = s.out.string(), d["opset"] = s.opset, d["nodes"] = s.nodes, d["input"] = s.input;
        d["output"] = s.output, d["bytes"] = s.bytes;
        return d;
      },
      py::arg("model"), py::arg("out"), py::arg("half") = false, py::arg("dynamic") = false, py::arg("end2end") = true,
      py::arg("opset") = 17, py::arg("imgsz") = std::array<int64_t, 2>{0, 0}, py::arg("batch") = 1,
      py::arg("max_det") = 300, "The model as ONNX (vision export --format onnx)");
  m.attr("onnx_max_opset") = onnx_max_opset();
}
