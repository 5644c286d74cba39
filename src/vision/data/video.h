// Video — frames in and out through FFmpeg's libraries (Debian's libavformat, libavcodec, libswscale, libavutil).
//
// VideoReader opens a file, a stream URL (whatever libavformat opens: mp4, mkv, avi, mov, webm, …; rtsp://, http://) or
// a camera (video4linux2) and decodes its best video stream to upright RGB frames; a live source that drops is opened
// again with back-off. Frames larger than max_pixels are refused before anything
// is allocated for them; packets that do not decode are skipped and counted (a warning each, at most 16 kept); a
// source with no decodable frame is an error naming it. Every libav* status is checked. A file is read as a file
// (`file:` and that protocol alone: its name is never a protocol, and no playlist in it reaches the network), and
// libav*'s single allocations are bounded (av_max_alloc, a process-wide setting: 8 bytes a pixel of the largest
// max_pixels of the readers opened so far, at least 256 MiB, at most FFmpeg's own INT_MAX).
// VideoWriter encodes RGB frames as H.264 (libx264, yuv420p, crf 23) in an mp4 — MPEG-4 part 2 when the build of
// libavcodec has no H.264 encoder —, at a constant frame rate. It writes "<path>.tmp.<pid>" and renames it over path
// when closed, so an interrupted write never leaves a half file at path; the destructor closes (an exception
// unwinding through it, or Ctrl-C handled by the caller, still gives a playable file).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "vision/data/image.h"
#include "vision/data/yuv.h"

namespace vision::data {

// Whether a --source names a video: a URL (rtsp://, rtmp://, http://, https://), a camera, or a file with a video
// extension (mp4, mkv, avi, mov, webm, m4v, mpg, mpeg, wmv, flv, ts; any case).
bool is_video_source(const std::string& source);
// A camera: "0", "1", … (/dev/video0, …) or a /dev/video* path, read through video4linux2 (libavdevice).
bool is_camera_source(const std::string& source);
// A stream URL: rtsp://, rtmp://, http:// or https:// (an HLS playlist too).
bool is_stream_url(const std::string& source);

// The image without an odd last column or row: the even size an H.264 (yuv420p) frame needs. Unchanged when even.
Image even_sized(Image image);

struct VideoInfo {
  int64_t width = 0, height = 0;
  double fps = 0;           // average frame rate (0 when the container does not say)
  int64_t frames = 0;       // the container's frame count (0 when unknown)
  std::string codec;        // "h264", "mpeg4", …
};

struct VideoReaderOptions {
  int64_t max_pixels = kDefaultMaxPixels;
  int64_t stride = 1;  // keep every stride-th frame (--vid-stride)
  int threads = 0;     // the decoder's threads (--decode-threads); 0: libavcodec's choice (cores + 1, at most 16)
  // A live source (a stream URL or a camera) that fails or stalls (no data for 15 s) mid-stream is opened again, up to
  // `reconnect` times in a row, after reconnect_delay seconds, doubled at each attempt (at most 30 s); each attempt is
  // a warning. Frame indices go on counting; timestamps go on from the last frame's. A file is never reopened.
  int reconnect = 5;
  double reconnect_delay = 1.0;
  // Hardware decoding: "none", or "cuda" (NVDEC through FFmpeg's CUDA hardware context, where the driver and this
  // FFmpeg have it and the codec has an NVDEC decoder; frames are copied back to the host and converted to RGB as
  // software-decoded ones are). When it is not available the source is decoded in software, with a warning saying why.
  std::string hwaccel = "none";
  // Frames as decoded, not converted to RGB: an 8-bit 4:2:0 frame (yuv420p, yuvj420p or nv12: most H.264, HEVC, VP9
  // and MPEG-4 video) comes as VideoFrame::yuv, `image` left empty — the detector converts it on the GPU, fused into
  // its letterbox (Detector::detect of Yuv420View). An NVDEC frame then stays on the GPU: copied out of the decoder's
  // surface into device memory of its own (CUDA builds). Frames of other formats still come as RGB.
  bool yuv = false;
  // With yuv: every frame's planes in device memory, whatever decoded them — a software-decoded frame is uploaded by
  // the reader (on its own thread and CUDA stream, so the upload overlaps the consumer's work). CUDA builds only.
  bool yuv_on_gpu = false;
};

struct VideoFrame {
  Image image;             // RGB (empty when the frame came as yuv)
  Yuv420Image yuv;         // the decoder's planes, with VideoReaderOptions::yuv (empty otherwise)
  int64_t index = 0;       // 0-based, in the source (counting the skipped ones)
  double timestamp = 0;    // seconds from the start
};

class VideoReader {
 public:
  explicit VideoReader(const std::string& source, const VideoReaderOptions& options = {});
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  const VideoInfo& info() const;
  // The next frame, or false at the end of the source. Throws vision::Error (input) naming the source when it ends
  // without a single decodable frame. frame.image's (and frame.yuv's) buffers are reused when they have room for the
  // frame (pass the last frame back to save an allocation per frame).
  bool read(VideoFrame& frame);
  // Problems met so far that did not stop decoding (packets that did not decode, reconnections), each naming the
  // source; at most 16 kept.
  const std::vector<std::string>& warnings() const;
  // How many times a live source was opened again after dropping.
  int64_t reconnects() const;
  // The decoding in use: "cuda" (NVDEC) or "none" (software).
  const std::string& hwaccel() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct VideoWriterOptions {
  // libx264's speed against size: ultrafast, superfast, veryfast, faster, fast, medium, slow, slower, veryslow
  // (ignored by the MPEG-4 fallback).
  std::string preset = "veryfast";
  int crf = 23;  // libx264's constant quality, 0 (lossless) to 51
  // Frames handed to the writer's own encoding thread, which converts them to YUV and encodes them while the caller
  // goes on; write() waits only when this many are still queued. 0: each frame is encoded inside write().
  int queue = 4;
};

class VideoWriter {
 public:
  // width and height: even, at most 8192; fps in (0, 1000].
  VideoWriter(const std::filesystem::path& path, int64_t width, int64_t height, double fps,
              const VideoWriterOptions& options = {});
  ~VideoWriter();
  VideoWriter(const VideoWriter&) = delete;
  VideoWriter& operator=(const VideoWriter&) = delete;

  // An RGB frame of the writer's size (copied: the caller may reuse it at once). An error of the encoding thread
  // (a full disk, say) is thrown by the next write() or by close().
  void write(const Image& frame);
  // Encodes what is queued, flushes the encoder, writes the trailer and renames the file into place. Idempotent.
  void close();
  const std::string& codec() const;  // "h264" or "mpeg4"
  int64_t frames() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vision::data
