// Video through FFmpeg (data/video.h): frames written as H.264 mp4 read back at the written size, rate and count, close
// to the originals, with timestamps and a frame stride; the file appears only when closed (and a writer destroyed
// unclosed still finishes it); hostile and broken files — random bytes, a truncated mp4, a damaged middle, a missing
// file, frames over the pixel limit — give clear errors naming the source, never a crash; cameras that are absent; live
// streams that drop (reconnected) or go away; several sources read at once (.streams lists).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <iterator>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli_util.h"
#include "test_util.h"
#include "vision/data/video.h"
#include "vision/data/video_streams.h"
#include "vision/track/mot_metrics.h"

extern "C" {
#include <libavutil/mem.h>
}

namespace vision::data {
namespace {

namespace fs = std::filesystem;

// Frame i: a gradient with a square moving right, 160×96.
Image test_frame(int64_t i) {
  Image im(160, 96, 3);
  for (int64_t y = 0; y < im.height; ++y)
    for (int64_t x = 0; x < im.width; ++x) {
      uint8_t* p = im.row(y) + x * 3;
      const bool square = x >= 10 + 8 * i && x < 40 + 8 * i && y >= 30 && y < 60;
      p[0] = square ? 240 : static_cast<uint8_t>(x);
      p[1] = square ? 30 : static_cast<uint8_t>(y * 2);
      p[2] = square ? 30 : 128;
    }
  return im;
}

double mean_abs_diff(const Image& a, const Image& b) {
  double sum = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) sum += std::abs(int(a.pixels[i]) - int(b.pixels[i]));
  return sum / static_cast<double>(a.pixels.size());
}

fs::path write_test_video(const fs::path& path, int64_t frames, double fps = 25) {
  VideoWriter w(path, 160, 96, fps);
  for (int64_t i = 0; i < frames; ++i) w.write(test_frame(i));
  EXPECT_FALSE(fs::exists(path)) << "the file appears when closed";
  w.close();
  EXPECT_EQ(w.frames(), frames);
  return path;
}

TEST(Video, WrittenFramesReadBack) {
  test::TempDir dir;
  const fs::path path = write_test_video(dir.path() / "a.mp4", 12);
  VideoReader r(path.string());
  EXPECT_EQ(r.info().width, 160);
  EXPECT_EQ(r.info().height, 96);
  EXPECT_NEAR(r.info().fps, 25.0, 1e-6);
  EXPECT_TRUE(r.info().codec == "h264" || r.info().codec == "mpeg4") << r.info().codec;
  VideoFrame f;
  int64_t n = 0;
  while (r.read(f)) {
    EXPECT_EQ(f.index, n);
    EXPECT_NEAR(f.timestamp, static_cast<double>(n) / 25.0, 1e-3);
    const double diff = mean_abs_diff(f.image, test_frame(n));
    EXPECT_LT(diff, 6.0) << "frame " << n;
    if (n > 0) {
      EXPECT_GT(mean_abs_diff(f.image, test_frame(n - 1)), diff) << "frame " << n << " is the frame written";
    }
    ++n;
  }
  EXPECT_EQ(n, 12);
  EXPECT_TRUE(r.warnings().empty());
  EXPECT_FALSE(r.read(f)) << "the end stays the end";

  VideoReader strided(path.string(), {.stride = 5});
  std::vector<int64_t> kept;
  while (strided.read(f)) kept.push_back(f.index);
  EXPECT_EQ(kept, (std::vector<int64_t>{0, 5, 10}));
}

// The encoding thread (VideoWriterOptions::queue) changes nothing but who encodes: the frames decoded from its file
// are the synchronous writer's, byte for byte, even when the caller overwrites its one image after every write().
TEST(Video, EncodingThreadWritesWhatTheCallerWroteAtTheTime) {
  test::TempDir dir;
  auto decoded = [](const fs::path& path) {
    std::vector<Image> frames;
    VideoReader r(path.string());
    VideoFrame f;
    while (r.read(f)) frames.push_back(f.image);
    return frames;
  };
  std::vector<std::vector<Image>> runs;
  for (int queue : {0, 1, 4}) {
    const fs::path path = dir.path() / fmt::format("q{}.mp4", queue);
    VideoWriter w(path, 160, 96, 25, {.queue = queue});
    Image reused;
    for (int64_t i = 0; i < 20; ++i) {
      reused = test_frame(i);
      w.write(reused);
      std::fill(reused.pixels.begin(), reused.pixels.end(), uint8_t{7});  // the writer copied it
    }
    EXPECT_EQ(w.frames(), 20);
    w.close();
    runs.push_back(decoded(path));
    ASSERT_EQ(runs.back().size(), 20u) << "queue " << queue;
    EXPECT_LT(mean_abs_diff(runs.back()[19], test_frame(19)), 6.0) << "queue " << queue;
  }
  for (size_t q = 1; q < runs.size(); ++q)
    for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_EQ(runs[q][i], runs[0][i]) << "run " << q << ", frame " << i;
}

TEST(Video, WriterOptionsAreChecked) {
  test::TempDir dir;
  EXPECT_NE(test::error_of([&] { VideoWriter w(dir.path() / "p.mp4", 160, 96, 25, {.preset = "warp"}); })
                .find("unknown encoder preset 'warp'"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { VideoWriter w(dir.path() / "c.mp4", 160, 96, 25, {.crf = 52}); }).find("crf must be"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { VideoWriter w(dir.path() / "q.mp4", 160, 96, 25, {.queue = -1}); }).find("frame queue"),
            std::string::npos);
  // A faster preset writes a file that reads back as the frames written.
  {
    VideoWriter w(dir.path() / "u.mp4", 160, 96, 25, {.preset = "ultrafast", .crf = 18});
    for (int64_t i = 0; i < 5; ++i) w.write(test_frame(i));
  }  // closed by the destructor
  VideoReader r((dir.path() / "u.mp4").string());
  VideoFrame f;
  int64_t n = 0;
  for (; r.read(f); ++n) EXPECT_LT(mean_abs_diff(f.image, test_frame(n)), 6.0) << "frame " << n;
  EXPECT_EQ(n, 5);
}

// --hwaccel cuda: NVDEC where the driver and FFmpeg have it (the frames then the software decoder's within the
// NV12/yuv420p conversion's rounding), else software decoding with one warning naming the source and why — the same
// frames bit for bit; an unknown value is refused.
TEST(Video, HwaccelCudaDecodesOnTheGpuOrFallsBackWithAWarning) {
  test::TempDir dir;
  const fs::path path = write_test_video(dir.path() / "h.mp4", 8);
  VideoReader soft(path.string());
  VideoReader hard(path.string(), {.hwaccel = "cuda"});
  EXPECT_EQ(soft.hwaccel(), "none");
  const bool nvdec = hard.hwaccel() == "cuda";
  if (!nvdec) {
    ASSERT_EQ(hard.warnings().size(), 1u);
    EXPECT_NE(hard.warnings()[0].find("--hwaccel cuda"), std::string::npos) << hard.warnings()[0];
    EXPECT_NE(hard.warnings()[0].find("decoding in software"), std::string::npos) << hard.warnings()[0];
    EXPECT_NE(hard.warnings()[0].find(path.filename().string()), std::string::npos) << hard.warnings()[0];
  }
  VideoFrame a, b;
  int64_t n = 0;
  while (soft.read(a)) {
    ASSERT_TRUE(hard.read(b)) << "frame " << n;
    EXPECT_EQ(a.index, b.index);
    EXPECT_EQ(a.timestamp, b.timestamp);
    if (nvdec)
      EXPECT_LT(mean_abs_diff(a.image, b.image), 1.0) << "frame " << n;
    else
      EXPECT_EQ(a.image, b.image) << "frame " << n;
    ++n;
  }
  EXPECT_FALSE(hard.read(b));
  EXPECT_EQ(n, 8);
  EXPECT_NE(test::error_of([&] { VideoReader r(path.string(), {.hwaccel = "vaapi"}); }).find("none or cuda"),
            std::string::npos);
}

// yuv: frames come as the decoder's 4:2:0 planes (image empty) with the same indices and times; their RGB
// (yuv420_to_rgb, the GPU letterbox's twin) is swscale's within its rounding; --hwaccel cuda where NVDEC is absent
// gives the software planes bit for bit (and on a GPU, tests/data/cuda/test_video_gpu.cpp: device planes, the same).
TEST(Video, YuvFramesAreTheDecodersPlanes) {
  test::TempDir dir;
  const fs::path path = write_test_video(dir.path() / "y.mp4", 10);
  VideoReader rgb(path.string(), {.stride = 3});
  VideoReader yuv(path.string(), {.stride = 3, .yuv = true});
  VideoFrame a, b;
  int64_t n = 0;
  while (rgb.read(a)) {
    ASSERT_TRUE(yuv.read(b)) << "frame " << n;
    EXPECT_EQ(a.index, b.index);
    EXPECT_EQ(a.timestamp, b.timestamp);
    EXPECT_TRUE(b.image.empty());
    ASSERT_FALSE(b.yuv.empty());
    EXPECT_FALSE(b.yuv.on_device);
    EXPECT_EQ(b.yuv.width, 160);
    EXPECT_EQ(b.yuv.height, 96);
    EXPECT_EQ(b.yuv.bytes.size(), Yuv420Image::packed_bytes(160, 96));
    const Image converted = yuv420_to_rgb(b.yuv.view());
    EXPECT_LT(mean_abs_diff(converted, a.image), 1.5) << "frame " << n;
    EXPECT_LT(mean_abs_diff(converted, test_frame(a.index)), 6.0) << "frame " << n;
    ++n;
  }
  EXPECT_FALSE(yuv.read(b));
  EXPECT_EQ(n, 4);
  // NVDEC, or its software fallback: the same planes.
  VideoReader soft(path.string(), {.yuv = true});
  VideoReader hard(path.string(), {.hwaccel = "cuda", .yuv = true});
  while (soft.read(a)) {
    ASSERT_TRUE(hard.read(b));
    if (b.yuv.on_device) continue;  // compared on the GPU host (VideoGpu)
    EXPECT_EQ(yuv420_to_rgb(a.yuv.view()), yuv420_to_rgb(b.yuv.view())) << "frame " << a.index;
  }
}

// --decode-threads: any number of decoder threads gives the same frames; out of range is an error naming it.
TEST(Video, DecoderThreadsChangeNothingButSpeed) {
  test::TempDir dir;
  const fs::path path = write_test_video(dir.path() / "t.mp4", 6);
  VideoReader automatic(path.string());
  VideoReader one(path.string(), {.threads = 1});
  VideoReader three(path.string(), {.threads = 3});
  VideoFrame a, b, c;
  int64_t n = 0;
  while (automatic.read(a)) {
    ASSERT_TRUE(one.read(b) && three.read(c));
    EXPECT_EQ(a.image, b.image) << n;
    EXPECT_EQ(a.image, c.image) << n;
    ++n;
  }
  EXPECT_EQ(n, 6);
  EXPECT_NE(test::error_of([&] { VideoReader r(path.string(), {.threads = -1}); }).find("decoder threads"),
            std::string::npos);
}

TEST(Video, AWriterDestroyedUnclosedFinishesTheFile) {
  test::TempDir dir;
  const fs::path path = dir.path() / "b.mp4";
  {
    VideoWriter w(path, 160, 96, 30);
    for (int64_t i = 0; i < 5; ++i) w.write(test_frame(i));
  }
  VideoReader r(path.string());
  VideoFrame f;
  int64_t n = 0;
  while (r.read(f)) ++n;
  EXPECT_EQ(n, 5);
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(Video, BadSourcesAreClearErrors) {
  test::TempDir dir;
  const fs::path good = write_test_video(dir.path() / "good.mp4", 10);
  const std::string bytes = test::read_file(good);

  const fs::path random = dir.path() / "random.mp4";
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(test::rng()());
  test::write_file(random, noise);
  EXPECT_NE(test::error_of([&] { VideoReader r(random.string()); }).find("video " + random.string()), std::string::npos);

  const fs::path truncated = dir.path() / "truncated.mp4";
  test::write_file(truncated, bytes.substr(0, bytes.size() / 2));
  const std::string e = test::error_of([&] {
    VideoReader r(truncated.string());
    VideoFrame f;
    while (r.read(f)) {
    }
  });
  EXPECT_NE(e.find("video " + truncated.string()), std::string::npos) << e;

  // Damaged in the middle: decodes what it can (the damaged packets reported), never crashes.
  const fs::path damaged = dir.path() / "damaged.mp4";
  std::string broken = bytes;
  for (size_t i = broken.size() / 3; i < broken.size() / 3 + 400; ++i) broken[i] = static_cast<char>(broken[i] ^ 0x5A);
  test::write_file(damaged, broken);
  try {
    VideoReader r(damaged.string());
    VideoFrame f;
    int64_t n = 0;
    while (r.read(f)) ++n;
    EXPECT_LE(n, 10);
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("video " + damaged.string()), std::string::npos) << err.what();
  }

  EXPECT_NE(test::error_of([&] { VideoReader r((dir.path() / "none.mp4").string()); }).find("cannot be opened"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { VideoReader r(good.string(), {.max_pixels = 1000}); }).find("larger than the limit"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { VideoWriter w(dir.path() / "odd.mp4", 161, 96, 25); }).find("even-sized"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { VideoWriter w(dir.path() / "x.unknownext", 160, 96, 25); }).find("container"),
            std::string::npos);
  VideoWriter w(dir.path() / "c.mp4", 160, 96, 25);
  EXPECT_NE(test::error_of([&] { w.write(Image(10, 10, 3)); }).find("a frame of 10×10×3"), std::string::npos);
}

TEST(Video, SourcesThatAreVideos) {
  for (const char* s : {"a.mp4", "b.MKV", "dir/c.avi", "d.mov", "e.webm", "rtsp://cam/stream", "https://x/y.m3u8", "0",
                        "12", "/dev/video2"})
    EXPECT_TRUE(is_video_source(s)) << s;
  for (const char* s : {"a.jpg", "images/", "*.png", "list.txt", "1234"}) EXPECT_FALSE(is_video_source(s)) << s;
  EXPECT_TRUE(is_camera_source("0") && is_camera_source("/dev/video0") && !is_camera_source("rtsp://cam/0"));
  EXPECT_TRUE(is_stream_url("rtmp://x/live") && !is_stream_url("/dev/video0"));
  // A folder named "0" is that folder, not the first camera.
  test::TempDir dir;
  fs::create_directory(dir.path() / "0");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  const bool camera = is_camera_source("0");
  fs::current_path(cwd);
  EXPECT_FALSE(camera);
}

// Found by fuzz_video: a 1.9 KB mp4 whose tables declare a huge count made the mov demuxer ask for 1.6 GB. libav*'s
// allocations are now bounded by what the largest allowed frame needs (≈ 1.3 GB at the default 160 megapixels): the
// file is an error naming it, and an allocation of 1.5 GB is refused. A relative file name that reads as a protocol
// ("concat:…") is a file, read as one.
TEST(Video, FilesAreReadAsFilesWithBoundedAllocations) {
  const fs::path bomb = fs::path(VISION_SOURCE_DIR) / "tests/fuzz/corpus/fuzz_video/regression-mov-table-1.6GB.mp4";
  ASSERT_TRUE(fs::exists(bomb)) << bomb;
  try {
    VideoReader r(bomb.string());
    VideoFrame f;
    for (int i = 0; i < 100 && r.read(f); ++i) EXPECT_LE(f.image.width * f.image.height, kDefaultMaxPixels);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("video " + bomb.string()), std::string::npos) << e.what();
  }
  void* big = av_malloc(size_t{1536} << 20);
  EXPECT_EQ(big, nullptr) << "libav*'s allocations are not bounded";
  av_free(big);
  void* small = av_malloc(size_t{1} << 20);
  EXPECT_NE(small, nullptr);
  av_free(small);

  test::TempDir dir;
  write_test_video(dir.path() / "concat:missing.mp4", 3);
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  int64_t frames = 0;
  const std::string e = test::error_of([&] {
    VideoReader r("concat:missing.mp4");
    VideoFrame f;
    while (r.read(f)) ++frames;
  });
  fs::current_path(cwd);
  EXPECT_EQ(e, "(no error)");
  EXPECT_EQ(frames, 3);
}

// A camera that is not there is a clear error naming it and its device, before anything is opened.
TEST(Video, AbsentCameraIsAClearError) {
  for (const auto& [source, device] : {std::pair{"57", "/dev/video57"}, std::pair{"/dev/video63", "/dev/video63"}}) {
    const std::string e = test::error_of([&] { VideoReader r(source); });
    EXPECT_NE(e.find(fmt::format("camera {}: there is no {} (is a camera connected?)", source, device)),
              std::string::npos)
        << e;
  }
}

// An HTTP server on 127.0.0.1 serving one body to one client after another (HTTP/1.1, its full Content-Length): the
// first `drops` connections get only the first half of the body before the server closes them (a stream that drops);
// after `serve` connections it stops listening (a stream that is gone).
class HttpTestServer {
 public:
  HttpTestServer(std::string body, int drops, int serve) : body_(std::move(body)), drops_(drops), serve_(serve) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t n = sizeof a;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_, 4) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &n) != 0)
      throw std::runtime_error("test HTTP server: no socket");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~HttpTestServer() {
    stop_ = true;
    thread_.join();
    if (listener_ >= 0) ::close(listener_);
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}/live.ts", port_); }
  int connections() const { return connections_; }

 private:
  void run() {
    while (!stop_ && connections_ < serve_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept(listener_, nullptr, nullptr);
      if (c < 0) continue;
      std::string request;
      char buf[1024];
      while (request.find("\r\n\r\n") == std::string::npos) {
        const ssize_t got = ::recv(c, buf, sizeof buf, 0);
        if (got <= 0) break;
        request.append(buf, static_cast<size_t>(got));
      }
      const bool drop = connections_ < drops_;
      const std::string head = fmt::format(
          "HTTP/1.1 200 OK\r\nContent-Type: video/mp2t\r\nContent-Length: {}\r\n\r\n", body_.size());
      const size_t n = drop ? body_.size() / 2 : body_.size();
      send_all(c, head.data(), head.size());
      send_all(c, body_.data(), n);
      ::shutdown(c, SHUT_RDWR);
      ::close(c);
      ++connections_;
    }
    ::close(listener_);  // gone: later connections are refused
    listener_ = -1;
  }
  static void send_all(int c, const char* p, size_t n) {
    while (n > 0) {
      const ssize_t sent = ::send(c, p, n, MSG_NOSIGNAL);
      if (sent <= 0) return;
      p += sent;
      n -= static_cast<size_t>(sent);
    }
  }

  std::string body_;
  int drops_, serve_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A live stream that drops mid-way is opened again (a warning says so) and its frames go on: every frame of the first
// half-connection, then every frame of the second, indices and timestamps increasing.
TEST(LiveStream, ADroppedStreamIsReconnected) {
  test::TempDir dir;
  const fs::path ts = write_test_video(dir.path() / "live.ts", 40);
  const int64_t all = [&] {
    VideoReader r(ts.string());
    VideoFrame f;
    int64_t n = 0;
    while (r.read(f)) ++n;
    return n;
  }();
  ASSERT_EQ(all, 40);
  HttpTestServer server(file_bytes(ts), /*drops=*/1, /*serve=*/2);
  VideoReader r(server.url(), {.reconnect = 3, .reconnect_delay = 0.05});
  VideoFrame f;
  int64_t frames = 0, last_index = -1;
  double last_time = -1;
  while (r.read(f)) {
    EXPECT_GT(f.index, last_index);
    EXPECT_GT(f.timestamp, last_time);
    last_index = f.index;
    last_time = f.timestamp;
    ++frames;
  }
  EXPECT_EQ(r.reconnects(), 1);
  EXPECT_EQ(server.connections(), 2);
  EXPECT_GT(frames, all) << "the frames before the drop, then the whole stream again";
  EXPECT_LT(frames, 2 * all);
  bool reported = false;
  for (const auto& w : r.warnings()) reported |= w.find("reconnecting in 0.05 s (attempt 1 of 3)") != std::string::npos;
  EXPECT_TRUE(reported) << fmt::format("{}", fmt::join(r.warnings(), "\n"));
}

// A live stream that drops and does not come back ends with an error naming it, after the attempts (never a hang).
TEST(LiveStream, AStreamThatIsGoneIsAClearErrorAfterTheAttempts) {
  test::TempDir dir;
  const fs::path ts = write_test_video(dir.path() / "live.ts", 40);
  HttpTestServer server(file_bytes(ts), /*drops=*/1, /*serve=*/1);
  VideoReader r(server.url(), {.reconnect = 2, .reconnect_delay = 0.05});
  VideoFrame f;
  const std::string e = test::error_of([&] {
    while (r.read(f)) {
    }
  });
  EXPECT_NE(e.find("the stream dropped"), std::string::npos) << e;
  EXPECT_NE(e.find("did not come back after 2 reconnection attempts"), std::string::npos) << e;
  EXPECT_EQ(r.reconnects(), 0);
}

// `vision synth --sequences --video` writes an mp4 per sequence; `vision track` follows its shapes (the frames decoded
// from H.264) and writes an annotated mp4 of the same frames.
TEST(VideoCli, SynthVideosAndTrackingThem) {
  test::TempDir dir;
  const test::CliRun synth = test::run_cli(fmt::format(
      "'{}' synth --out '{}' --sequences 1 --video --frames 20 --imgsz 320 --seed 5 2>&1", VISION_CLI, dir.path().string()));
  ASSERT_EQ(synth.code, 0) << synth.out;
  const fs::path seq = dir.path() / "seq-01";
  const fs::path video = seq / "seq-01.mp4";
  ASSERT_TRUE(fs::is_regular_file(video));
  EXPECT_FALSE(fs::exists(seq / "img1"));
  const test::CliRun r = test::run_cli(fmt::format(
      "'{}' track --model '{}/assets/yolo26n_synth.safetensors' --source '{}' --device cpu --save '{}' --save-txt '{}' "
      "--eval '{}' --quiet 2>&1",
      VISION_CLI, VISION_SOURCE_DIR, video.string(), (dir.path() / "out").string(), (dir.path() / "t.txt").string(),
      (seq / "gt" / "gt.txt").string()));
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.find("IDF1 ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_GE(std::stod(r.out.substr(at + 5)), 0.8) << r.out;
  VideoReader annotated((dir.path() / "out" / "seq-01.mp4").string());
  EXPECT_EQ(annotated.info().width, 320);
  VideoFrame f;
  int64_t n = 0;
  while (annotated.read(f)) ++n;
  EXPECT_EQ(n, 20);
  EXPECT_EQ(track::read_mot_file(dir.path() / "t.txt", false).back().frame, 20);
  // --batch: seven frames at a time through the detector (the last batch partial), the same tracks.
  const test::CliRun batched = test::run_cli(fmt::format(
      "'{}' track --model '{}/assets/yolo26n_synth.safetensors' --source '{}' --device cpu --batch 7 --save-txt '{}' "
      "--quiet 2>&1",
      VISION_CLI, VISION_SOURCE_DIR, video.string(), (dir.path() / "t7.txt").string()));
  ASSERT_EQ(batched.code, 0) << batched.out;
  EXPECT_EQ(test::read_file(dir.path() / "t7.txt"), test::read_file(dir.path() / "t.txt"));
}

// `vision synth --video --out DIR` alone writes videos with their ground truth (#32: sensible defaults); `--videos N`
// is `--video --sequences N`; --video with a detection dataset's --train is refused.
TEST(VideoCli, SynthVideoDefaultsAndVideosCount) {
  test::TempDir dir;
  const test::CliRun alone =
      test::run_cli(fmt::format("'{}' synth --video --out '{}' 2>&1", VISION_CLI, (dir.path() / "a").string()));
  ASSERT_EQ(alone.code, 0) << alone.out;
  EXPECT_NE(alone.out.find("4 videos of 60 frames"), std::string::npos) << alone.out;
  for (const char* seq : {"seq-01", "seq-02", "seq-03", "seq-04"}) {
    const fs::path d = dir.path() / "a" / seq;
    EXPECT_TRUE(fs::is_regular_file(d / (std::string(seq) + ".mp4"))) << seq;
    EXPECT_TRUE(fs::is_regular_file(d / "gt" / "gt.txt")) << seq;
    EXPECT_FALSE(fs::exists(d / "img1")) << seq;
  }
  EXPECT_FALSE(fs::exists(dir.path() / "a" / "seq-05"));
  VideoReader first((dir.path() / "a" / "seq-01" / "seq-01.mp4").string());
  VideoFrame f;
  int64_t n = 0;
  while (first.read(f)) ++n;
  EXPECT_EQ(n, 60);
  const test::CliRun two = test::run_cli(fmt::format("'{}' synth --videos 2 --frames 5 --out '{}' 2>&1", VISION_CLI,
                                                     (dir.path() / "b").string()));
  ASSERT_EQ(two.code, 0) << two.out;
  EXPECT_TRUE(fs::is_regular_file(dir.path() / "b" / "seq-02" / "seq-02.mp4"));
  EXPECT_FALSE(fs::exists(dir.path() / "b" / "seq-03"));
  const test::CliRun mixed = test::run_cli(fmt::format("'{}' synth --video --train 4 --val 1 --out '{}' 2>&1",
                                                       VISION_CLI, (dir.path() / "c").string()));
  EXPECT_NE(mixed.code, 0);
  EXPECT_NE(mixed.out.find("--train and --val are for a detection dataset"), std::string::npos) << mixed.out;
}

// `vision track --source list.streams`: each source tracked on its own, as if alone — the same tracks as each video
// tracked by itself — with a track file and an annotated mp4 per source; --eval takes one source.
TEST(VideoCli, TrackAStreamsListSourceBySource) {
  test::TempDir dir;
  const test::CliRun synth = test::run_cli(fmt::format(
      "'{}' synth --out '{}' --sequences 2 --video --frames 12 --imgsz 320 --seed 6 2>&1", VISION_CLI,
      dir.path().string()));
  ASSERT_EQ(synth.code, 0) << synth.out;
  const fs::path v1 = dir.path() / "seq-01" / "seq-01.mp4", v2 = dir.path() / "seq-02" / "seq-02.mp4";
  std::ofstream(dir.path() / "two.streams") << "# two sequences\n" << v1.string() << "\n" << v2.string() << "\n";
  const std::string track = fmt::format("'{}' track --model '{}/assets/yolo26n_synth.safetensors' --device cpu --quiet",
                                        VISION_CLI, VISION_SOURCE_DIR);
  const test::CliRun r = test::run_cli(fmt::format("{} --source '{}' --save '{}' --save-txt '{}' 2>&1", track,
                                                   (dir.path() / "two.streams").string(),
                                                   (dir.path() / "out").string(), (dir.path() / "t.txt").string()));
  ASSERT_EQ(r.code, 0) << r.out;
  for (const auto& [video, stem] : {std::pair{v1, "seq-01"}, std::pair{v2, "seq-02"}}) {
    const fs::path alone = dir.path() / (std::string(stem) + "-alone.txt");
    const test::CliRun one = test::run_cli(
        fmt::format("{} --source '{}' --save-txt '{}' 2>&1", track, video.string(), alone.string()));
    ASSERT_EQ(one.code, 0) << one.out;
    const auto mine = track::read_mot_file(dir.path() / fmt::format("t_{}.txt", stem), false);
    const auto ref = track::read_mot_file(alone, false);
    ASSERT_EQ(mine.size(), ref.size()) << stem;
    ASSERT_GE(mine.size(), 12u) << stem;
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(mine[i].frame, ref[i].frame);
      EXPECT_EQ(mine[i].id, ref[i].id);
      for (int c = 0; c < 4; ++c) EXPECT_NEAR(mine[i].xyxy[c], ref[i].xyxy[c], 0.011) << stem << " row " << i;
    }
    VideoReader annotated((dir.path() / "out" / (std::string(stem) + ".mp4")).string());
    VideoFrame f;
    int64_t n = 0;
    while (annotated.read(f)) ++n;
    EXPECT_EQ(n, 12) << stem;
  }
  const test::CliRun bad = test::run_cli(fmt::format("{} --source '{}' --eval '{}' 2>&1", track,
                                                     (dir.path() / "two.streams").string(),
                                                     (dir.path() / "seq-01" / "gt" / "gt.txt").string()));
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--eval scores one source's tracks"), std::string::npos) << bad.out;
}

// `vision predict` on a video: JSON per kept frame (--vid-stride) with its index and time, and an annotated mp4.
TEST(VideoCli, PredictOnAVideo) {
  test::TempDir dir;
  const fs::path video = dir.path() / "v.mp4";
  {
    VideoWriter w(video, 160, 96, 25);
    for (int64_t i = 0; i < 10; ++i) w.write(test_frame(i));
  }
  int status = 0;
  const std::string out = test::run_command(
      fmt::format("'{}' predict --model '{}/assets/yolo26n_synth.safetensors' --source '{}' --device cpu --imgsz 160 "
                  "--conf 0.01 --vid-stride 4 --batch 2 --json --quiet --save '{}' 2>/dev/null",
                  VISION_CLI, VISION_SOURCE_DIR, video.string(), (dir.path() / "out").string()),
      &status);
  ASSERT_EQ(test::exit_code(status), 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 3u);  // frames 0, 4, 8
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(j[i]["frame"], 4 * static_cast<int64_t>(i));
    EXPECT_NEAR(j[i]["timestamp"].get<double>(), 4.0 * static_cast<double>(i) / 25, 1e-3);
    EXPECT_EQ(j[i]["width"], 160);
  }
  VideoReader annotated((dir.path() / "out" / "v.mp4").string());
  EXPECT_NEAR(annotated.info().fps, 25.0 / 4, 1e-6);
  VideoFrame f;
  int64_t n = 0;
  while (annotated.read(f)) ++n;
  EXPECT_EQ(n, 3);
  const test::CliRun bad = test::run_cli(fmt::format("'{}' predict --model '{}/assets/yolo26n_synth.safetensors' --source "
                                                     "'{}' 2>&1", VISION_CLI, VISION_SOURCE_DIR,
                                                     (dir.path() / "missing.mp4").string()));
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("cannot be opened"), std::string::npos) << bad.out;
}


// Several files read at once: every frame of each, in its order, each call giving the next frame of every source still
// running (in source order); the pixels those of a plain VideoReader.
TEST(VideoStreams, FilesGiveEveryFrameOfEachInOrder) {
  test::TempDir dir;
  const fs::path a = write_test_video(dir.path() / "a.mp4", 12), b = write_test_video(dir.path() / "b.mp4", 7);
  VideoStreams streams({a.string(), b.string()}, {}, /*queue=*/2);
  ASSERT_EQ(streams.size(), 2u);
  EXPECT_EQ(streams.info(1).width, 160);
  VideoReader plain_a(a.string()), plain_b(b.string());
  std::vector<StreamFrame> got;
  int64_t calls = 0, next[2] = {0, 0};
  while (streams.read(got)) {
    ++calls;
    EXPECT_EQ(got.size(), calls <= 7 ? 2u : 1u);
    for (size_t i = 0; i < got.size(); ++i) {
      const size_t src = got[i].source;
      EXPECT_EQ(src, i) << "source order";
      EXPECT_EQ(got[i].frame.index, next[src]++);
      VideoFrame want;
      ASSERT_TRUE((src == 0 ? plain_a : plain_b).read(want));
      EXPECT_EQ(got[i].frame.image.pixels, want.image.pixels);
    }
  }
  EXPECT_EQ(calls, 12);
  EXPECT_EQ(next[0], 12);
  EXPECT_EQ(next[1], 7);
  EXPECT_EQ(streams.dropped(0), 0) << "a file drops nothing";
  EXPECT_FALSE(streams.read(got)) << "ended stays ended";
}

// Frames' buffers are reused: VideoReader::read decodes into the image it is given when it has room (the same
// pixels as into a fresh one), and VideoStreams hands recycled images to its decoder — after the first few frames,
// every frame arrives in a buffer that was recycled (the allocation per frame cost more than decoding a 1080p frame).
TEST(VideoStreams, RecycledImagesAreReused) {
  test::TempDir dir;
  const fs::path a = write_test_video(dir.path() / "a.mp4", 30);
  VideoReader fresh(a.string()), reused(a.string());
  VideoFrame f, r;
  r.image = Image(400, 300, 3);  // larger than a 160-wide frame: its buffer has room
  const uint8_t* buffer = r.image.pixels.data();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(fresh.read(f));
    ASSERT_TRUE(reused.read(r));
    EXPECT_EQ(r.image.pixels.data(), buffer) << i;
    EXPECT_EQ(r.image.width, f.image.width);
    EXPECT_EQ(r.image.height, f.image.height);
    EXPECT_EQ(r.image.pixels, f.image.pixels) << i;
  }

  // Recycled buffers are told apart by their capacity, not their address (a freed buffer's address may well come back
  // from the allocator): each frame read is handed back grown to 400 × 300 × 3 bytes of capacity, which a frame
  // decoded into a fresh buffer does not have.
  VideoStreams streams({a.string()}, {}, /*queue=*/2);
  const size_t big = 400 * 300 * 3, frame_bytes = f.image.pixels.size();
  std::vector<StreamFrame> got;
  int64_t frames = 0, in_recycled = 0;
  while (streams.read(got)) {
    for (StreamFrame& sf : got) {
      ++frames;
      EXPECT_EQ(sf.frame.image.pixels.size(), frame_bytes);
      in_recycled += sf.frame.image.pixels.capacity() >= big;
      sf.frame.image.pixels.reserve(big);
      streams.recycle(std::move(sf.frame.image));
    }
  }
  EXPECT_EQ(frames, 30);
  // The frames decoded before the first came back (the queue, the one being decoded, the one read) are in fresh
  // buffers.
  EXPECT_GE(in_recycled, frames - 4) << "frames decoded into recycled buffers";
}

// A .streams file: one source per line, blanks and comments skipped; what it cannot be is a clear error naming it.
// set_ahead lets a file's decoder run past its queue (by bytes of decoded frames) while the consumer is away — the
// model making its plan — and 0 brings it back; the frames still come every one, in order.
TEST(VideoStreams, DecodingAheadIsBoundedByBytesAndEnds) {
  test::TempDir dir;
  const fs::path a = write_test_video(dir.path() / "a.mp4", 24);
  VideoStreams streams({a.string()}, {}, /*queue=*/2);
  const size_t frame_bytes = 160 * 96 * 3;
  auto settles_at = [&](size_t n) {  // waits (at most 10 s) for the queue to reach n, then checks it stays there
    for (int i = 0; i < 1000 && streams.queued(0) < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return streams.queued(0);
  };
  EXPECT_EQ(settles_at(2), 2u) << "the queue alone";
  streams.set_ahead(10 * frame_bytes + frame_bytes / 2);
  EXPECT_EQ(settles_at(10), 10u) << "ahead by 10 frames' bytes";
  streams.set_ahead(0);
  std::vector<StreamFrame> got;
  std::vector<int64_t> order;
  while (streams.read(got)) {
    for (StreamFrame& f : got) order.push_back(f.frame.index);
    if (order.size() == 9) EXPECT_LE(streams.queued(0), 2u) << "back to the queue once it has drained";
  }
  std::vector<int64_t> expected(24);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(order, expected);
}

TEST(VideoStreams, ListFilesAndTheirErrors) {
  test::TempDir dir;
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.path() / name) << text;
    return dir.path() / name;
  };
  EXPECT_TRUE(is_stream_list("cams.streams") && !is_stream_list("a.mp4") && !is_stream_list(".streams"));
  EXPECT_EQ(read_stream_list(write("a.streams", "# cameras\n  rtsp://a/1  \n\n0\r\nclip.mp4\n")),
            (std::vector<std::string>{"rtsp://a/1", "0", "clip.mp4"}));
  EXPECT_NE(test::error_of([&] { read_stream_list(write("e.streams", "# nothing\n\n")); }).find("lists no source"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { read_stream_list(dir.path() / "missing.streams"); }).find("cannot be read"),
            std::string::npos);
  std::string many;
  for (int i = 0; i < 65; ++i) many += fmt::format("v{}.mp4\n", i);
  EXPECT_NE(test::error_of([&] { read_stream_list(write("m.streams", many)); }).find("more than 64 sources"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { read_stream_list(write("l.streams", std::string(5000, 'x'))); }).find("a line of 5000"),
            std::string::npos);
  // A source that does not open is an error naming it; the ones before it are closed again.
  const fs::path good = write_test_video(dir.path() / "good.mp4", 3);
  const std::string e = test::error_of([&] { VideoStreams s({good.string(), (dir.path() / "gone.mp4").string()}); });
  EXPECT_NE(e.find("gone.mp4: cannot be opened"), std::string::npos) << e;
}

// `vision predict --source list.streams`: every frame of every source, each line naming its source, an annotated mp4 per
// source (a stem taken twice gets _2).
TEST(VideoCli, PredictOnAStreamsList) {
  test::TempDir dir;
  fs::create_directories(dir.path() / "x");
  const fs::path a = write_test_video(dir.path() / "a.mp4", 5), b = write_test_video(dir.path() / "x" / "a.mp4", 3);
  std::ofstream(dir.path() / "two.streams") << a.string() << "\n" << b.string() << "\n";
  int status = 0;
  const std::string out = test::run_command(
      fmt::format("'{}' predict --model '{}/assets/yolo26n_synth.safetensors' --source '{}' --device cpu --imgsz 160 "
                  "--conf 0.01 --batch 4 --json --quiet --save '{}' 2>/dev/null",
                  VISION_CLI, VISION_SOURCE_DIR, (dir.path() / "two.streams").string(), (dir.path() / "out").string()),
      &status);
  ASSERT_EQ(test::exit_code(status), 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  std::map<std::string, std::vector<int64_t>> frames;
  for (const auto& e : j) frames[e["source"].get<std::string>()].push_back(e["frame"].get<int64_t>());
  EXPECT_EQ(frames[a.string()], (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(frames[b.string()], (std::vector<int64_t>{0, 1, 2}));
  for (const auto& [name, count] : {std::pair{"a.mp4", 5}, std::pair{"a_2.mp4", 3}}) {
    VideoReader annotated((dir.path() / "out" / name).string());
    VideoFrame f;
    int64_t n = 0;
    while (annotated.read(f)) ++n;
    EXPECT_EQ(n, count) << name;
  }
}

}  // namespace
}  // namespace vision::data
