#include "vision/data/video_streams.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <fstream>
#include <mutex>
#include <thread>

#include "vision/core/error.h"

namespace vision::data {

bool is_stream_list(const std::string& source) {
  return source.size() > 8 && source.compare(source.size() - 8, 8, ".streams") == 0;
}

std::vector<std::string> read_stream_list(const std::filesystem::path& file) {
  constexpr size_t kMaxSources = 64, kMaxLine = 4096;
  std::ifstream in(file);
  VISION_CHECK_INPUT(in.good(), "{}: the list of streams cannot be read", file.string());
  std::vector<std::string> sources;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    VISION_CHECK_INPUT(line.size() <= kMaxLine, "{}:{}: a line of {} characters (at most {})", file.string(), number,
                       line.size(), kMaxLine);
    const size_t first = line.find_first_not_of(" \t\r"), last = line.find_last_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    sources.push_back(line.substr(first, last - first + 1));
    VISION_CHECK_INPUT(sources.size() <= kMaxSources, "{}: more than {} sources", file.string(), kMaxSources);
  }
  VISION_CHECK_INPUT(!sources.empty(), "{}: lists no source (one per line)", file.string());
  return sources;
}

namespace {

// One source: its reader, its thread, and the frames decoded ahead.
struct StreamSlot {
  std::string source;
  std::unique_ptr<VideoReader> reader;
  bool live = false;
  std::deque<VideoFrame> queue;
  size_t frame_bytes = 0;  // the last decoded frame's (its RGB pixels or YUV planes)
  bool ended = false;
  std::exception_ptr error;
  int64_t dropped = 0;
  std::thread thread;
};

}  // namespace

struct VideoStreams::Impl {
  std::vector<std::unique_ptr<StreamSlot>> slots;
  size_t capacity = 4;
  mutable std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  std::vector<Image> spare;  // recycled images whose buffers the decoders reuse
  std::vector<Yuv420Image> spare_yuv;  // and recycled YUV frames (host or device planes)
  size_t ahead_bytes = 0;  // set_ahead

  // Frames a source's thread may have queued before it waits (under mutex).
  size_t capacity_of(const StreamSlot& s) const {
    if (s.live || ahead_bytes == 0 || s.frame_bytes == 0) return capacity;
    return std::max(capacity, std::min<size_t>(4096, ahead_bytes / s.frame_bytes));
  }
  // Recycled buffers kept (under mutex): enough for every frame in flight — the queues, a batch being used and the
  // ones being decoded.
  size_t spare_limit() const {
    size_t n = 0;
    for (const auto& s : slots) n += capacity_of(*s) + capacity + 2;
    return n;
  }

  void decode(StreamSlot& s) {
    for (;;) {
      VideoFrame f;
      {
        std::lock_guard lock(mutex);
        if (!spare.empty()) {
          f.image = std::move(spare.back());
          spare.pop_back();
        }
        if (!spare_yuv.empty()) {
          f.yuv = std::move(spare_yuv.back());
          spare_yuv.pop_back();
        }
      }
      bool more = false;
      std::exception_ptr error;
      try {
        more = s.reader->read(f);
      } catch (...) {
        error = std::current_exception();
      }
      std::unique_lock lock(mutex);
      if (error || !more) {
        s.error = error;
        s.ended = true;
        changed.notify_all();
        return;
      }
      s.frame_bytes = f.yuv.empty() ? f.image.pixels.size() : Yuv420Image::packed_bytes(f.yuv.width, f.yuv.height);
      if (s.live) {
        if (s.queue.size() >= capacity) s.queue.pop_front(), ++s.dropped;
      } else {
        changed.wait(lock, [&] { return stopping || s.queue.size() < capacity_of(s); });
      }
      if (stopping) return;
      s.queue.push_back(std::move(f));
      changed.notify_all();
    }
  }
};

VideoStreams::VideoStreams(const std::vector<std::string>& sources, const VideoReaderOptions& options, size_t queue)
    : impl_(new Impl) {
  VISION_CHECK(!sources.empty() && queue >= 1, "VideoStreams: needs at least one source and a queue of 1 or more");
  impl_->capacity = queue;
  for (const std::string& source : sources) {
    auto s = std::make_unique<StreamSlot>();
    s->source = source;
    s->reader = std::make_unique<VideoReader>(source, options);
    s->live = is_stream_url(source) || is_camera_source(source);
    impl_->slots.push_back(std::move(s));
  }
  for (auto& s : impl_->slots) s->thread = std::thread([this, slot = s.get()] { impl_->decode(*slot); });
}

VideoStreams::~VideoStreams() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->changed.notify_all();
  // A thread inside VideoReader::read returns within the reader's own I/O limit (15 s without data).
  for (auto& s : impl_->slots)
    if (s->thread.joinable()) s->thread.join();
}

size_t VideoStreams::size() const { return impl_->slots.size(); }
const std::string& VideoStreams::source(size_t i) const { return impl_->slots.at(i)->source; }
const VideoInfo& VideoStreams::info(size_t i) const { return impl_->slots.at(i)->reader->info(); }

bool VideoStreams::read(std::vector<StreamFrame>& frames) {
  frames.clear();
  Impl& d = *impl_;
  std::unique_lock lock(d.mutex);
  for (size_t i = 0; i < d.slots.size(); ++i) {
    StreamSlot& s = *d.slots[i];
    d.changed.wait(lock, [&] { return !s.queue.empty() || s.ended; });
    if (!s.queue.empty()) {
      frames.push_back({i, std::move(s.queue.front())});
      s.queue.pop_front();
      d.changed.notify_all();
    } else if (s.error) {
      std::exception_ptr e = s.error;
      s.error = nullptr;  // reported once
      std::rethrow_exception(e);
    }
  }
  return !frames.empty();
}

size_t VideoStreams::queued(size_t i) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->slots.at(i)->queue.size();
}

void VideoStreams::set_ahead(size_t bytes) {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->ahead_bytes == bytes) return;  // the CLI says 0 after every batch: nothing to wake
    impl_->ahead_bytes = bytes;
  }
  impl_->changed.notify_all();
}

void VideoStreams::recycle(Image&& image) {
  if (image.pixels.capacity() == 0) return;
  std::lock_guard lock(impl_->mutex);
  if (impl_->spare.size() < impl_->spare_limit()) impl_->spare.push_back(std::move(image));
}

void VideoStreams::recycle(Yuv420Image&& frame) {
  if (frame.bytes.capacity() == 0 && frame.device_capacity == 0) return;
  std::lock_guard lock(impl_->mutex);
  if (impl_->spare_yuv.size() < impl_->spare_limit()) impl_->spare_yuv.push_back(std::move(frame));
}

std::vector<std::string> VideoStreams::warnings() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<std::string> all;
  for (const auto& s : impl_->slots) {
    // The reader's own warnings: read only once its thread has ended (they are its thread's while it runs).
    if (s->ended)
      for (const std::string& w : s->reader->warnings()) all.push_back(w);
    if (s->dropped > 0)
      all.push_back(fmt::format("video {}: {} frame{} dropped while the model was behind", s->source, s->dropped,
                                s->dropped == 1 ? "" : "s"));
  }
  return all;
}

int64_t VideoStreams::dropped(size_t i) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->slots.at(i)->dropped;
}

}  // namespace vision::data
