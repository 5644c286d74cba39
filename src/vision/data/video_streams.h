// Several video sources read at once — ultralytics' `.streams` lists, and a single video decoded ahead of its consumer.
// Each source has a VideoReader on a thread of its own, so decoding overlaps the caller's work (the model). A file gives
// every frame (its thread waits while its queue is full); a live source (a stream URL or a camera) keeps only its
// newest frames (the oldest dropped when its queue is full, and counted), so that a slower consumer sees the present.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "vision/data/video.h"

namespace vision::data {

// Whether a --source is a list of video sources: a file whose name ends in ".streams".
bool is_stream_list(const std::string& source);
// The sources a .streams file lists, one per line (surrounding blanks trimmed; empty lines and lines starting with '#'
// skipped). Throws vision::Error (input) naming the file when it cannot be read, lists none, lists more than 64, or
// has a line over 4096 characters.
std::vector<std::string> read_stream_list(const std::filesystem::path& file);

struct StreamFrame {
  size_t source = 0;  // index into the sources given
  VideoFrame frame;
};

class VideoStreams {
 public:
  // Opens every source (in order; a source that does not open is an error naming it) and starts its thread. queue:
  // frames decoded ahead per source (≥ 1).
  VideoStreams(const std::vector<std::string>& sources, const VideoReaderOptions& options = {}, size_t queue = 4);
  ~VideoStreams();  // stops and joins the threads
  VideoStreams(const VideoStreams&) = delete;
  VideoStreams& operator=(const VideoStreams&) = delete;

  size_t size() const;
  const std::string& source(size_t i) const;
  const VideoInfo& info(size_t i) const;
  // The next frame of every source that has not ended, in source order (one per source), waiting for each. False (and
  // no frames) once every source has ended. A source that failed rethrows its error here, naming it.
  bool read(std::vector<StreamFrame>& frames);
  // Hands a frame's image back once the caller is done with it: its buffer is reused for a later frame (a bounded
  // number are kept; an image of another size is fine). Saves a large allocation, zero-filled and faulted in, per frame.
  void recycle(Image&& image);
  void recycle(Yuv420Image&& frame);  // the same for a frame that came as YUV planes (VideoReaderOptions::yuv)
  // Lets each file source decode further ahead than `queue` frames, while its queued frames take fewer than `bytes`
  // (at most 4,096 frames); 0, the default, goes back to `queue` frames (those beyond it are read first). For a start
  // that the consumer spends elsewhere — the model's first batch making its plan — so the decoders do not stand idle
  // meanwhile. Live sources keep `queue` frames (their newest).
  void set_ahead(size_t bytes);
  // Every source's warnings (VideoReader::warnings), and a line per live source that dropped frames.
  std::vector<std::string> warnings() const;
  int64_t dropped(size_t i) const;  // frames of a live source dropped because the consumer was behind
  size_t queued(size_t i) const;    // frames of source i decoded and not yet read

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vision::data
