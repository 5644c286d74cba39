#include "vision/data/video.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <deque>
#include <exception>
#include <cstdarg>
#include <mutex>
#include <thread>

#include "vision/core/error.h"

#ifdef VISION_HAS_VIDEO
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavdevice/avdevice.h>
#include <libavformat/avformat.h>
#include <libavutil/hwcontext.h>
#include <libavutil/imgutils.h>
#include <libavutil/mem.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}
#ifdef VISION_HAS_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
extern "C" {
#include <libavutil/hwcontext_cuda.h>
}

#include "vision/cuda/check.h"
#endif
#endif

namespace vision::data {

bool is_camera_source(const std::string& source) {
  if (source.rfind("/dev/video", 0) == 0) return true;
  // "0" … "999", unless a file or folder of that name is there (ultralytics' source=0 is the first camera).
  std::error_code ec;
  return !source.empty() && source.size() <= 3 &&
         std::all_of(source.begin(), source.end(), [](unsigned char c) { return std::isdigit(c); }) &&
         !std::filesystem::exists(source, ec);
}

bool is_stream_url(const std::string& source) {
  for (const char* scheme : {"rtsp://", "rtmp://", "http://", "https://"})
    if (source.rfind(scheme, 0) == 0) return true;
  return false;
}

std::string camera_device(const std::string& source) {
  return source.rfind("/dev/", 0) == 0 ? source : "/dev/video" + std::to_string(std::stoi(source));
}

bool is_video_source(const std::string& source) {
  if (is_stream_url(source) || is_camera_source(source)) return true;
  std::string ext = std::filesystem::path(source).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  static constexpr std::array<const char*, 11> kExtensions = {".mp4", ".mkv", ".avi", ".mov", ".webm", ".m4v",
                                                              ".mpg", ".mpeg", ".wmv", ".flv", ".ts"};
  return std::find(kExtensions.begin(), kExtensions.end(), ext) != kExtensions.end();
}

Image even_sized(Image image) {
  const int64_t w = image.width & ~int64_t{1}, h = image.height & ~int64_t{1};
  if (w == image.width && h == image.height) return image;
  Image even(w, h, image.channels);
  for (int64_t y = 0; y < h; ++y) std::copy_n(image.row(y), w * image.channels, even.row(y));
  return even;
}

#ifdef VISION_HAS_VIDEO

namespace {

std::string av_error(int code) {
  char buffer[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, buffer, sizeof buffer);
  return buffer;
}

// libav* write nothing to stderr (a library's users get our errors, not its log): the last error line it logs on this
// thread is kept, and added to the error of a call that fails (libavformat says "moov atom not found" where its
// status says only "invalid data").
thread_local std::string t_last_log;

void keep_last_error(void* avcl, int level, const char* format, va_list args) {
  if (level > AV_LOG_ERROR) return;
  char line[512];
  int print_prefix = 0;  // the message alone, without "[mov,mp4,… @ 0x…]"
  av_log_format_line(avcl, level, format, args, line, sizeof line, &print_prefix);
  std::string text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  t_last_log = text;
}

// libav*'s largest single allocation: what the biggest frame a reader allows needs (8 bytes a pixel covers every pixel
// format up to 16-bit RGBA, plus padding), at least 256 MiB and at most FFmpeg's own default (INT_MAX). The demuxers
// size some tables from counts a file declares: a 1.9 KB mp4 made the mov demuxer ask for 1.6 GB (fuzz_video).
// av_max_alloc is one setting for the process: it is only raised here, never lowered below what an open reader needs.
void bound_libav_allocations(int64_t max_pixels) {
  static std::mutex mutex;
  static size_t bound = 0;
  const size_t need = std::min<size_t>(
      INT_MAX, std::max<size_t>(size_t{256} << 20, static_cast<size_t>(max_pixels) * 8 + (size_t{16} << 20)));
  std::lock_guard lock(mutex);
  if (need > bound) {
    bound = need;
    av_max_alloc(bound);
  }
}

void quiet_libav_logs() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(keep_last_error); });
  t_last_log.clear();
}

// av_error(code), with the last line libav* logged on this thread.
std::string av_error_logged(int code) {
  std::string s = av_error(code);
  if (!t_last_log.empty()) s += " (" + t_last_log + ")";
  return s;
}

// No blocking libavformat call waits longer than this for data (a stalled stream, an unreachable host).
constexpr auto kIoTimeout = std::chrono::seconds(15);
constexpr size_t kMaxWarnings = 16;

}  // namespace

struct VideoReader::Impl {
  std::string source;
  VideoReaderOptions options;
  bool live = false;  // a stream URL or a camera: reconnected when it drops
  VideoInfo info;
  AVFormatContext* format = nullptr;
  AVCodecContext* decoder = nullptr;
  AVPacket* packet = nullptr;
  AVFrame* frame = nullptr;
  AVFrame* host_frame = nullptr;  // a hardware frame copied to the host
  SwsContext* scaler = nullptr;
  AVBufferRef* hw_device = nullptr;  // the CUDA device context, while hardware decoding is on
#ifdef VISION_HAS_CUDA
  // NVDEC's post-processing and the copies of frames into device memory of their own (out of NVDEC's surfaces, or up
  // from the host with yuv_on_gpu) run on this stream, in the process's primary context.
  cudaStream_t cuda_stream = nullptr;
  int cuda_device = 0;  // the device current where the reader was made: the stream's, set on the decoding thread
#endif
  std::string hwaccel = "none";      // in use
  bool hw_refused = false;           // tried and not available: software from then on (reconnections too)
  int stream = -1;
  AVRational time_base = {0, 1};
  int64_t start_pts = 0;
  int64_t decoded = 0;  // frames decoded (kept or skipped by the stride), over every connection
  int64_t failed_packets = 0;
  int64_t reconnects = 0;
  double time_offset = 0, last_timestamp = 0;  // a reconnected stream's timestamps go on from the last frame's
  bool draining = false;
  std::vector<std::string> warnings;
  std::chrono::steady_clock::time_point deadline;

  static int interrupted(void* self) {
    return std::chrono::steady_clock::now() > static_cast<Impl*>(self)->deadline ? 1 : 0;
  }
  void arm() { deadline = std::chrono::steady_clock::now() + kIoTimeout; }

  ~Impl() {
    close_input();
    av_buffer_unref(&hw_device);
#ifdef VISION_HAS_CUDA
    if (cuda_stream) cudaStreamDestroy(cuda_stream);  // NOLINT: a destructor's release; nothing to report to
#endif
  }

  void close_input() {
    sws_freeContext(scaler);
    scaler = nullptr;
    av_frame_free(&host_frame);
    av_frame_free(&frame);
    av_packet_free(&packet);
    avcodec_free_context(&decoder);
    avformat_close_input(&format);
  }

  void warn(const std::string& w) {
    if (warnings.size() < kMaxWarnings) warnings.push_back(w);
  }

  // Opens the source and its best video stream's decoder (the first time, and again on each reconnection).
  void open() {
    const AVInputFormat* input_format = nullptr;
    std::string url = source;
    if (is_camera_source(source)) {
      url = camera_device(source);
      static std::once_flag devices;
      std::call_once(devices, [] { avdevice_register_all(); });
      input_format = av_find_input_format("video4linux2");
      VISION_CHECK_INPUT(input_format, "camera {}: this FFmpeg has no video4linux2 input", source);
      std::error_code ec;
      VISION_CHECK_INPUT(std::filesystem::exists(url, ec), "camera {}: there is no {} (is a camera connected?)",
                         source, url);
    }
    format = avformat_alloc_context();
    VISION_CHECK(format, "video {}: out of memory opening it", source);
    format->interrupt_callback = {&Impl::interrupted, this};
    arm();
    AVDictionary* open_options = nullptr;
    av_dict_set(&open_options, "rw_timeout", "15000000", 0);  // microseconds, for the protocols that take it
    if (!live) {  // live: a stream URL or a camera
      // A file is read as a file: its path never names a protocol ("concat:…", "subfile,…", "http:…" are file
      // names), and nothing the file holds (an HLS or concat playlist) makes libavformat open another protocol —
      // no network request and no pipe from a file someone handed us.
      url = "file:" + source;
      av_dict_set(&open_options, "protocol_whitelist", "file", 0);
    }
    int ret = avformat_open_input(&format, url.c_str(), input_format, &open_options);
    av_dict_free(&open_options);
    if (ret < 0) {
      format = nullptr;  // freed by avformat_open_input
      fail_input("{} {}: cannot be opened: {}", is_camera_source(source) ? "camera" : "video", source,
                 av_error_logged(ret));
    }
    arm();
    ret = avformat_find_stream_info(format, nullptr);
    VISION_CHECK_INPUT(ret >= 0, "video {}: its streams cannot be read: {}", source, av_error_logged(ret));
    const AVCodec* codec = nullptr;
    stream = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    VISION_CHECK_INPUT(stream != AVERROR_STREAM_NOT_FOUND, "video {}: it holds no video stream", source);
    VISION_CHECK_INPUT(stream >= 0 && codec, "video {}: no decoder for its video codec ({})", source,
                       stream >= 0 ? avcodec_get_name(format->streams[stream]->codecpar->codec_id) : "unknown");
    AVStream* st = format->streams[stream];
    const AVCodecParameters* par = st->codecpar;
    VISION_CHECK_INPUT(par->width > 0 && par->height > 0, "video {}: the video stream has no frame size", source);
    VISION_CHECK_INPUT(static_cast<int64_t>(par->width) * par->height <= options.max_pixels,
                       "video {}: frames of {}×{} are larger than the limit of {} pixels", source, par->width,
                       par->height, options.max_pixels);
    decoder = avcodec_alloc_context3(codec);
    VISION_CHECK(decoder, "video {}: out of memory for the decoder", source);
    ret = avcodec_parameters_to_context(decoder, par);
    VISION_CHECK_INPUT(ret >= 0, "video {}: bad codec parameters: {}", source, av_error(ret));
    decoder->thread_count = options.threads;  // 0: as many as libavcodec picks
    decoder->max_pixels = options.max_pixels;  // frames the stream grows to mid-way are refused by the decoder too
    if (options.hwaccel == "cuda" && !hw_refused) use_nvdec(codec);
    ret = avcodec_open2(decoder, codec, nullptr);
    VISION_CHECK_INPUT(ret >= 0, "video {}: the {} decoder does not open: {}", source, codec->name, av_error(ret));
    packet = av_packet_alloc();
    frame = av_frame_alloc();
    VISION_CHECK(packet && frame, "video {}: out of memory", source);
    time_base = st->time_base;
    start_pts = st->start_time != AV_NOPTS_VALUE ? st->start_time : 0;
    const AVRational rate = st->avg_frame_rate.num > 0 ? st->avg_frame_rate : st->r_frame_rate;
    info = {.width = par->width, .height = par->height, .fps = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0.0,
            .frames = st->nb_frames, .codec = avcodec_get_name(par->codec_id)};
    draining = false;
  }

  // The decoder set to decode on the GPU (NVDEC) when the codec has a CUDA hardware configuration and a CUDA device
  // context can be made; otherwise a warning, and software decoding for this source from then on.
  void use_nvdec(const AVCodec* codec) {
    const auto refuse = [&](const std::string& why) {
      hw_refused = true;
      hwaccel = "none";
      warn(fmt::format("video {}: --hwaccel cuda: {}; decoding in software", source, why));
    };
    bool supported = false;
    for (int i = 0;; ++i) {
      const AVCodecHWConfig* c = avcodec_get_hw_config(codec, i);
      if (!c) break;
      supported = supported || ((c->methods & AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX) &&
                                c->device_type == AV_HWDEVICE_TYPE_CUDA && c->pix_fmt == AV_PIX_FMT_CUDA);
    }
    if (!supported) return refuse(fmt::format("this FFmpeg has no NVDEC decoder for {}", codec->name));
    if (!hw_device) {
      const std::string why = make_cuda_device();
      if (!why.empty()) return refuse(why);
    }
    decoder->hw_device_ctx = av_buffer_ref(hw_device);
    VISION_CHECK(decoder->hw_device_ctx, "video {}: out of memory for the hardware decoder", source);
    // CUDA frames when the decoder offers them for this stream; else its first software format (libavcodec then
    // decodes in software, and read() sees host frames).
    decoder->get_format = [](AVCodecContext*, const AVPixelFormat* formats) {
      for (const AVPixelFormat* f = formats; *f != AV_PIX_FMT_NONE; ++f)
        if (*f == AV_PIX_FMT_CUDA) return *f;
      for (const AVPixelFormat* f = formats; *f != AV_PIX_FMT_NONE; ++f)
        if (!(av_pix_fmt_desc_get(*f)->flags & AV_PIX_FMT_FLAG_HWACCEL)) return *f;
      return AV_PIX_FMT_NONE;
    };
    hwaccel = "cuda";
  }

#ifdef VISION_HAS_CUDA
  // FFmpeg's CUDA device context on the process's own (primary) context and a stream of ours, so that decoded frames
  // are device memory the engine's kernels and copies can use (FFmpeg's own primary-context mode refuses a context the
  // CUDA runtime already made, whose flags differ). "" when made, else why not.
  void make_cuda_stream() {
    if (cuda_stream) return;
    VISION_CUDA_CHECK(cudaGetDevice(&cuda_device));
    VISION_CUDA_CHECK(cudaStreamCreateWithFlags(&cuda_stream, cudaStreamNonBlocking));
  }

  std::string make_cuda_device() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
      cudaGetLastError();  // NOLINT: cleared, reported as the reason
      return "no usable CUDA device for NVDEC";
    }
    CUresult (*get_current)(CUcontext*) = nullptr;
    cudaDriverEntryPointQueryResult found{};
    VISION_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", reinterpret_cast<void**>(&get_current),
                                                       12000, cudaEnableDefault, &found));
    CUcontext context = nullptr;
    if (found != cudaDriverEntryPointSuccess || !get_current || get_current(&context) != CUDA_SUCCESS || !context)
      return "the CUDA driver's current context cannot be read";
    make_cuda_stream();
    hw_device = av_hwdevice_ctx_alloc(AV_HWDEVICE_TYPE_CUDA);
    VISION_CHECK(hw_device, "video {}: out of memory for the CUDA device context", source);
    auto* device_context = reinterpret_cast<AVHWDeviceContext*>(hw_device->data);
    auto* cuda = static_cast<AVCUDADeviceContext*>(device_context->hwctx);
    cuda->cuda_ctx = context;
    cuda->stream = reinterpret_cast<CUstream>(cuda_stream);
    const int ret = av_hwdevice_ctx_init(hw_device);
    if (ret < 0) {
      av_buffer_unref(&hw_device);
      return fmt::format("FFmpeg's CUDA device context does not start ({})", av_error_logged(ret));
    }
    return "";
  }
#else
  std::string make_cuda_device() {
    const int ret = av_hwdevice_ctx_create(&hw_device, AV_HWDEVICE_TYPE_CUDA, nullptr, nullptr, 0);
    if (ret >= 0) return "";
    hw_device = nullptr;
    return fmt::format("no CUDA device for NVDEC ({})", av_error(ret));
  }
#endif

  // The frame's planes into out.yuv, as they are, when the reader gives YUV and the frame is 8-bit 4:2:0 (an NVDEC
  // frame copied into device memory of out.yuv's own); false when it is another format (then converted to RGB).
  bool to_yuv(VideoFrame& out) {
    const auto format = static_cast<AVPixelFormat>(frame->format);
    AVPixelFormat planes = format;
    if (format == AV_PIX_FMT_CUDA) {
      if (!frame->hw_frames_ctx) return false;
      planes = reinterpret_cast<const AVHWFramesContext*>(frame->hw_frames_ctx->data)->sw_format;
    }
    const bool nv12 = planes == AV_PIX_FMT_NV12;
    if (!nv12 && planes != AV_PIX_FMT_YUV420P && planes != AV_PIX_FMT_YUVJ420P) return false;
    const int64_t w = frame->width, h = frame->height;
    VISION_CHECK_INPUT(w > 0 && h > 0 && w * h <= options.max_pixels,
                       "video {}: a frame of {}×{} is larger than the limit of {} pixels", source, w, h,
                       options.max_pixels);
    Yuv420Image& y = out.yuv;
    y.width = w, y.height = h, y.nv12 = nv12;
    y.matrix = frame->colorspace == AVCOL_SPC_BT709 ? YuvMatrix::bt709 : YuvMatrix::bt601;
    y.full_range = frame->color_range == AVCOL_RANGE_JPEG || planes == AV_PIX_FMT_YUVJ420P;
    const size_t bytes = Yuv420Image::packed_bytes(w, h);
    const int64_t cw = (w + 1) / 2, ch = (h + 1) / 2;
    if (format == AV_PIX_FMT_CUDA || options.yuv_on_gpu) {
#ifdef VISION_HAS_CUDA
      // Device planes of the frame's own: NVDEC's copied out of the decoder's surface (queued on the stream NVDEC
      // post-processed it on, so after it, and done before the surface is released), a software frame's uploaded.
      make_cuda_stream();
      VISION_CUDA_CHECK(cudaSetDevice(cuda_device));  // this thread may be the reader's own (VideoStreams)
      if (y.device_capacity < bytes) {
        y.device_memory.reset();
        void* memory = nullptr;
        VISION_CUDA_CHECK(cudaMalloc(&memory, bytes));
        y.device_memory = std::shared_ptr<void>(memory, [](void* p) { cudaFree(p); });  // NOLINT: a release
        y.device_capacity = bytes;
      }
      y.on_device = true;
      const Yuv420View v = y.view();
      const cudaMemcpyKind kind = format == AV_PIX_FMT_CUDA ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
      const auto copy = [&](const uint8_t* dst, int64_t dst_pitch, int plane, int64_t row, int64_t rows) {
        VISION_CUDA_CHECK(cudaMemcpy2DAsync(const_cast<uint8_t*>(dst), static_cast<size_t>(dst_pitch),
                                            frame->data[plane], static_cast<size_t>(frame->linesize[plane]),
                                            static_cast<size_t>(row), static_cast<size_t>(rows), kind, cuda_stream));
      };
      copy(v.y, w, 0, w, h);
      if (nv12) {
        copy(v.u, 2 * cw, 1, 2 * cw, ch);
      } else {
        copy(v.u, cw, 1, cw, ch);
        copy(v.v, cw, 2, cw, ch);
      }
      VISION_CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
      return true;
#else
      if (format == AV_PIX_FMT_CUDA) return false;
      fail("video {}: frames in GPU memory (yuv_on_gpu) need a CUDA build", source);
#endif
    }
    y.on_device = false;
    if (y.bytes.capacity() < bytes) y.bytes = std::vector<uint8_t>();  // no copy of the old bytes when growing
    y.bytes.resize(bytes);
    const Yuv420View v = y.view();
    const auto copy_plane = [](uint8_t* dst, int64_t dst_pitch, const uint8_t* src, int64_t src_pitch, int64_t row,
                               int64_t rows) {
      for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * src_pitch, row, dst + r * dst_pitch);
    };
    copy_plane(const_cast<uint8_t*>(v.y), w, frame->data[0], frame->linesize[0], w, h);
    if (nv12) {
      copy_plane(const_cast<uint8_t*>(v.u), 2 * cw, frame->data[1], frame->linesize[1], 2 * cw, ch);
    } else {
      copy_plane(const_cast<uint8_t*>(v.u), cw, frame->data[1], frame->linesize[1], cw, ch);
      copy_plane(const_cast<uint8_t*>(v.v), cw, frame->data[2], frame->linesize[2], cw, ch);
    }
    return true;
  }

  // A live source dropped (why): closed and opened again after 1, 2, 4, … × options.reconnect_delay seconds (at most
  // 30 s), up to options.reconnect times in a row; each attempt is a warning. False when the attempts are spent.
  bool reconnect(const std::string& why) {
    close_input();
    double delay = options.reconnect_delay;
    for (int attempt = 1; attempt <= options.reconnect; ++attempt, delay = std::min(2 * delay, 30.0)) {
      warn(fmt::format("video {}: {}; reconnecting in {:g} s (attempt {} of {})", source, why, delay, attempt,
                       options.reconnect));
      std::this_thread::sleep_for(std::chrono::duration<double>(delay));
      try {
        open();
        ++reconnects;
        time_offset = last_timestamp + (info.fps > 0 ? 1.0 / info.fps : 0.0);
        return true;
      } catch (const Error& e) {
        close_input();
        warn(fmt::format("video {}: reconnecting failed: {}", source, e.what()));
      }
    }
    return false;
  }

  void to_image(VideoFrame& out) {
    const int64_t pts = frame->best_effort_timestamp;
    if (options.yuv && to_yuv(out)) {
      out.image.width = out.image.height = 0;
      out.image.pixels.clear();  // keeps its capacity for a later RGB frame
      return stamp(out, pts);
    }
    out.yuv.width = out.yuv.height = 0;
    const AVFrame* pixels = frame;
    if (frame->format == AV_PIX_FMT_CUDA) {  // NVDEC: the frame is on the GPU; copied back in its software format
      if (!host_frame) host_frame = av_frame_alloc();
      VISION_CHECK(host_frame, "video {}: out of memory", source);
      av_frame_unref(host_frame);
      const int ret = av_hwframe_transfer_data(host_frame, frame, 0);
      VISION_CHECK_INPUT(ret >= 0, "video {}: a frame decoded by NVDEC cannot be copied from the GPU: {}", source,
                         av_error(ret));
      pixels = host_frame;
    }
    const int64_t w = pixels->width, h = pixels->height;
    VISION_CHECK_INPUT(w > 0 && h > 0 && w * h <= options.max_pixels,
                       "video {}: a frame of {}×{} is larger than the limit of {} pixels", source, w, h,
                       options.max_pixels);
    scaler = sws_getCachedContext(scaler, static_cast<int>(w), static_cast<int>(h),
                                  static_cast<AVPixelFormat>(pixels->format), static_cast<int>(w), static_cast<int>(h),
                                  AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr);
    VISION_CHECK_INPUT(scaler, "video {}: frames in pixel format {} cannot be converted to RGB", source,
                       pixels->format);
    // The caller's buffer when it has room (VideoStreams hands decoded frames' buffers back: a fresh zero-filled 6 MB
    // allocation per 1080p frame, its pages faulted in anew, cost more than decoding it).
    const auto bytes = static_cast<size_t>(w * h * 3);
    if (out.image.pixels.capacity() >= bytes) {
      out.image.width = w, out.image.height = h, out.image.channels = 3;
      out.image.pixels.resize(bytes);
    } else {
      out.image = Image(w, h, 3);
    }
    uint8_t* dst[4] = {out.image.pixels.data(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {static_cast<int>(3 * w), 0, 0, 0};
    const int rows = sws_scale(scaler, pixels->data, pixels->linesize, 0, static_cast<int>(h), dst, dst_stride);
    VISION_CHECK(rows == h, "video {}: converting a frame to RGB gave {} of {} rows", source, rows, h);
    stamp(out, pts);
  }

  // The frame's index and time.
  void stamp(VideoFrame& out, int64_t pts) {
    out.timestamp = pts != AV_NOPTS_VALUE && time_base.num > 0
                        ? time_offset + static_cast<double>(pts - start_pts) * av_q2d(time_base)
                        : (info.fps > 0 ? static_cast<double>(decoded - 1) / info.fps : 0.0);
    last_timestamp = out.timestamp;
    out.index = decoded - 1;
  }
};

VideoReader::VideoReader(const std::string& source, const VideoReaderOptions& options) : impl_(new Impl) {
  quiet_libav_logs();
  VISION_CHECK(options.max_pixels > 0 && options.max_pixels <= (int64_t{1} << 36),
               "video: max_pixels must be in [1, 2^36], got {}", options.max_pixels);
  bound_libav_allocations(options.max_pixels);
  Impl& d = *impl_;
  d.source = source;
  d.options = options;
  d.live = is_stream_url(source) || is_camera_source(source);
  VISION_CHECK(options.stride >= 1, "video: the frame stride must be at least 1, got {}", options.stride);
  VISION_CHECK(options.hwaccel == "none" || options.hwaccel == "cuda",
               "video: hwaccel must be none or cuda, got '{}'", options.hwaccel);
  VISION_CHECK(options.threads >= 0 && options.threads <= 256, "video: decoder threads must be 0 (automatic) to 256, got {}",
               options.threads);
  VISION_CHECK(!options.yuv_on_gpu || options.yuv, "video: yuv_on_gpu puts YUV frames on the GPU: set yuv too");
#ifdef VISION_HAS_CUDA
  if (options.yuv_on_gpu) d.make_cuda_stream();  // on this thread: its current device is the frames' device
#else
  VISION_CHECK(!options.yuv_on_gpu, "video: frames on the GPU (yuv_on_gpu) need a CUDA build of vision-cpp");
#endif
  VISION_CHECK(options.reconnect >= 0 && options.reconnect_delay >= 0 && options.reconnect_delay <= 60,
               "video: reconnect needs at least 0 attempts and a delay of 0–60 s, got {} and {}", options.reconnect,
               options.reconnect_delay);
  d.open();
}

VideoReader::~VideoReader() = default;

const VideoInfo& VideoReader::info() const { return impl_->info; }
const std::vector<std::string>& VideoReader::warnings() const { return impl_->warnings; }
int64_t VideoReader::reconnects() const { return impl_->reconnects; }
const std::string& VideoReader::hwaccel() const { return impl_->hwaccel; }

bool VideoReader::read(VideoFrame& out) {
  Impl& d = *impl_;
  for (int errors = 0;;) {
    int ret = avcodec_receive_frame(d.decoder, d.frame);
    if (ret == 0) {
      ++d.decoded;
      const bool keep = (d.decoded - 1) % d.options.stride == 0;
      if (keep) d.to_image(out);
      av_frame_unref(d.frame);
      if (keep) return true;
      continue;
    }
    if (ret == AVERROR_EOF) {
      VISION_CHECK_INPUT(d.decoded > 0, "video {}: no frame could be decoded ({} packet{} failed)", d.source,
                         d.failed_packets, d.failed_packets == 1 ? "" : "s");
      return false;
    }
    if (ret != AVERROR(EAGAIN)) {
      d.warn(fmt::format("video {}: a frame did not decode: {}", d.source, av_error(ret)));
      VISION_CHECK_INPUT(++errors < 1000, "video {}: the decoder keeps failing: {}", d.source, av_error(ret));
      continue;
    }
    // The decoder wants input: the next packet of our stream, or the flush at the end.
    d.arm();
    ret = av_read_frame(d.format, d.packet);
    if (ret < 0) {
      // A live source that stalls or fails (not one that ends) is opened again, with back-off.
      if (d.live && ret != AVERROR_EOF && !d.draining) {
        const std::string why = ret == AVERROR_EXIT
                                    ? fmt::format("no data for {} s", static_cast<long long>(kIoTimeout.count()))
                                    : "the stream dropped: " + av_error_logged(ret);
        if (d.reconnect(why)) continue;
        fail_input("video {}: {}, and it did not come back after {} reconnection attempt{}", d.source, why,
                   d.options.reconnect, d.options.reconnect == 1 ? "" : "s");
      }
      VISION_CHECK_INPUT(ret != AVERROR_EXIT, "video {}: no data for {} s: the stream stalled", d.source,
                         static_cast<long long>(kIoTimeout.count()));
      if (ret != AVERROR_EOF) d.warn(fmt::format("video {}: reading stopped: {}", d.source, av_error(ret)));
      VISION_CHECK_INPUT(!d.draining, "video {}: reading failed at the end: {}", d.source, av_error(ret));
      d.draining = true;
      ret = avcodec_send_packet(d.decoder, nullptr);
      VISION_CHECK(ret >= 0 || ret == AVERROR_EOF, "video {}: flushing the decoder: {}", d.source, av_error(ret));
      continue;
    }
    if (d.packet->stream_index == d.stream) {
      ret = avcodec_send_packet(d.decoder, d.packet);
      if (ret < 0 && ret != AVERROR(EAGAIN)) {
        ++d.failed_packets;
        d.warn(fmt::format("video {}: a packet did not decode: {}", d.source, av_error(ret)));
      }
    }
    av_packet_unref(d.packet);
  }
}

struct VideoWriter::Impl {
  std::filesystem::path path, temporary;
  // The encoding thread (VideoWriterOptions::queue > 0): frames wait in `queued`, their buffers come back to `spare`.
  std::thread worker;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Image> queued;
  std::vector<Image> spare;
  size_t queue_limit = 0;
  bool finishing = false;
  std::exception_ptr error;  // the encoding thread's, thrown by the next write() or close()
  int64_t accepted = 0;
  AVFormatContext* format = nullptr;
  AVCodecContext* encoder = nullptr;
  AVStream* stream = nullptr;
  AVFrame* frame = nullptr;
  AVPacket* packet = nullptr;
  SwsContext* scaler = nullptr;
  int64_t width = 0, height = 0, next_pts = 0;
  bool opened = false, closed = false;
  std::string codec;

  ~Impl() {
    stop_worker();
    sws_freeContext(scaler);
    av_frame_free(&frame);
    av_packet_free(&packet);
    avcodec_free_context(&encoder);
    if (format) {
      if (format->pb) avio_closep(&format->pb);
      avformat_free_context(format);
    }
    if (!closed) {
      std::error_code ec;
      std::filesystem::remove(temporary, ec);
    }
  }

  // RGB to the encoder's YUV frame, then encoded (on the encoding thread when there is one).
  void encode_rgb(const Image& image) {
    int ret = av_frame_make_writable(frame);
    VISION_CHECK(ret >= 0, "video {}: {}", path.string(), av_error(ret));
    const uint8_t* src[4] = {image.pixels.data(), nullptr, nullptr, nullptr};
    const int src_stride[4] = {static_cast<int>(3 * width), 0, 0, 0};
    sws_scale(scaler, src, src_stride, 0, static_cast<int>(height), frame->data, frame->linesize);
    frame->pts = next_pts++;
    encode(frame);
  }

  void run_worker() {
    for (;;) {
      Image image;
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return !queued.empty() || finishing; });
        if (queued.empty()) return;  // finishing, and everything encoded
        image = std::move(queued.front());
        queued.pop_front();
      }
      try {
        if (!error) encode_rgb(image);
      } catch (...) {
        std::lock_guard lock(mutex);
        error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex);
        spare.push_back(std::move(image));
      }
      changed.notify_all();
    }
  }

  // Lets the encoding thread finish what is queued and joins it.
  void stop_worker() {
    if (!worker.joinable()) return;
    {
      std::lock_guard lock(mutex);
      finishing = true;
    }
    changed.notify_all();
    worker.join();
  }

  void rethrow_error() {
    std::lock_guard lock(mutex);
    if (error) std::rethrow_exception(error);
  }

  void encode(AVFrame* f) {
    int ret = avcodec_send_frame(encoder, f);
    VISION_CHECK(ret >= 0, "video {}: encoding a frame: {}", path.string(), av_error(ret));
    for (;;) {
      ret = avcodec_receive_packet(encoder, packet);
      if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) return;
      VISION_CHECK(ret >= 0, "video {}: encoding: {}", path.string(), av_error(ret));
      if (packet->duration == 0) packet->duration = 1;  // one frame (the mp4 muxer needs it for the last frame)
      av_packet_rescale_ts(packet, encoder->time_base, stream->time_base);
      packet->stream_index = stream->index;
      ret = av_interleaved_write_frame(format, packet);
      VISION_CHECK(ret >= 0, "video {}: writing: {}", path.string(), av_error(ret));
    }
  }
};

VideoWriter::VideoWriter(const std::filesystem::path& path, int64_t width, int64_t height, double fps,
                         const VideoWriterOptions& options)
    : impl_(new Impl) {
  quiet_libav_logs();
  Impl& d = *impl_;
  static constexpr std::array<std::string_view, 9> kPresets = {"ultrafast", "superfast", "veryfast", "faster", "fast",
                                                               "medium",    "slow",      "slower",   "veryslow"};
  VISION_CHECK(std::find(kPresets.begin(), kPresets.end(), options.preset) != kPresets.end(),
               "video {}: unknown encoder preset '{}' (one of ultrafast, superfast, veryfast, faster, fast, medium, slow, "
               "slower, veryslow)",
               path.string(), options.preset);
  VISION_CHECK(options.crf >= 0 && options.crf <= 51, "video {}: crf must be 0 to 51, got {}", path.string(),
               options.crf);
  VISION_CHECK(options.queue >= 0 && options.queue <= 64, "video {}: the frame queue must be 0 to 64 frames, got {}",
               path.string(), options.queue);
  VISION_CHECK(width > 0 && height > 0 && width % 2 == 0 && height % 2 == 0 && width <= 8192 && height <= 8192,
               "video {}: frames must be even-sized and at most 8192 a side, got {}×{}", path.string(), width, height);
  VISION_CHECK(fps > 0 && fps <= 1000, "video {}: the frame rate must be in (0, 1000], got {}", path.string(), fps);
  d.path = path, d.width = width, d.height = height;
  d.temporary = path;
  d.temporary += fmt::format(".tmp.{}", ::getpid());
  const AVOutputFormat* container = av_guess_format(nullptr, path.string().c_str(), nullptr);
  VISION_CHECK(container, "video {}: no container format for the file's extension (write .mp4, .mkv, .avi or .mov)",
               path.string());
  int ret = avformat_alloc_output_context2(&d.format, container, nullptr, d.temporary.string().c_str());
  VISION_CHECK(ret >= 0 && d.format, "video {}: {}", path.string(), av_error(ret));
  const AVCodec* codec = avcodec_find_encoder_by_name("libx264");
  if (!codec) codec = avcodec_find_encoder(AV_CODEC_ID_H264);
  if (!codec) codec = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
  VISION_CHECK(codec, "video {}: libavcodec has neither an H.264 nor an MPEG-4 encoder", path.string());
  d.codec = avcodec_get_name(codec->id);
  d.stream = avformat_new_stream(d.format, nullptr);
  d.encoder = avcodec_alloc_context3(codec);
  d.packet = av_packet_alloc();
  d.frame = av_frame_alloc();
  VISION_CHECK(d.stream && d.encoder && d.packet && d.frame, "video {}: out of memory", path.string());
  const AVRational rate = av_d2q(fps, 100000);
  d.encoder->width = static_cast<int>(width);
  d.encoder->height = static_cast<int>(height);
  d.encoder->pix_fmt = AV_PIX_FMT_YUV420P;
  d.encoder->time_base = av_inv_q(rate);
  d.encoder->framerate = rate;
  d.encoder->gop_size = 30;
  if (d.format->oformat->flags & AVFMT_GLOBALHEADER) d.encoder->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  AVDictionary* settings = nullptr;
  if (std::string(codec->name) == "libx264") {
    av_dict_set(&settings, "preset", options.preset.c_str(), 0);
    av_dict_set(&settings, "crf", std::to_string(options.crf).c_str(), 0);
  } else {
    d.encoder->bit_rate = std::max<int64_t>(1'000'000, width * height * 4);
  }
  ret = avcodec_open2(d.encoder, codec, &settings);
  av_dict_free(&settings);
  VISION_CHECK(ret >= 0, "video {}: the {} encoder does not open: {}", path.string(), codec->name, av_error(ret));
  ret = avcodec_parameters_from_context(d.stream->codecpar, d.encoder);
  VISION_CHECK(ret >= 0, "video {}: {}", path.string(), av_error(ret));
  d.stream->time_base = d.encoder->time_base;
  if (!(d.format->oformat->flags & AVFMT_NOFILE)) {
    ret = avio_open(&d.format->pb, d.temporary.string().c_str(), AVIO_FLAG_WRITE);
    VISION_CHECK(ret >= 0, "video {}: cannot be written: {}", path.string(), av_error(ret));
  }
  ret = avformat_write_header(d.format, nullptr);
  VISION_CHECK(ret >= 0, "video {}: writing the header: {}", path.string(), av_error(ret));
  d.opened = true;
  d.frame->format = AV_PIX_FMT_YUV420P;
  d.frame->width = static_cast<int>(width);
  d.frame->height = static_cast<int>(height);
  ret = av_frame_get_buffer(d.frame, 0);
  VISION_CHECK(ret >= 0, "video {}: out of memory for a frame", path.string());
  d.scaler = sws_getContext(static_cast<int>(width), static_cast<int>(height), AV_PIX_FMT_RGB24, static_cast<int>(width),
                            static_cast<int>(height), AV_PIX_FMT_YUV420P, SWS_BILINEAR, nullptr, nullptr, nullptr);
  VISION_CHECK(d.scaler, "video {}: no RGB to YUV conversion", path.string());
  d.queue_limit = static_cast<size_t>(options.queue);
  if (d.queue_limit > 0) d.worker = std::thread([&d] { d.run_worker(); });
}

VideoWriter::~VideoWriter() {
  try {
    close();
  } catch (...) {  // the temporary file is removed by Impl; nothing else to do while unwinding
  }
}

void VideoWriter::write(const Image& image) {
  Impl& d = *impl_;
  VISION_CHECK(!d.closed, "video {}: written to after close()", d.path.string());
  VISION_CHECK(image.width == d.width && image.height == d.height && image.channels == 3,
               "video {}: a frame of {}×{}×{} for a {}×{} RGB video", d.path.string(), image.width, image.height,
               image.channels, d.width, d.height);
  if (!d.worker.joinable()) {
    d.encode_rgb(image);
    ++d.accepted;
    return;
  }
  Image copy;
  {
    std::unique_lock lock(d.mutex);
    d.changed.wait(lock, [&] { return d.queued.size() < d.queue_limit || d.error; });
    if (d.error) std::rethrow_exception(d.error);
    if (!d.spare.empty()) {
      copy = std::move(d.spare.back());
      d.spare.pop_back();
    }
  }
  if (copy.pixels.size() != image.pixels.size()) copy = Image(image.width, image.height, 3);
  std::copy(image.pixels.begin(), image.pixels.end(), copy.pixels.begin());
  {
    std::lock_guard lock(d.mutex);
    d.queued.push_back(std::move(copy));
  }
  d.changed.notify_all();
  ++d.accepted;
}

void VideoWriter::close() {
  Impl& d = *impl_;
  if (d.closed) return;
  d.closed = true;  // whatever happens below, close() is not tried again (the destructor calls it)
  try {
    d.stop_worker();
    d.rethrow_error();
    d.encode(nullptr);
    const int ret = av_write_trailer(d.format);
    VISION_CHECK(ret >= 0, "video {}: writing the trailer: {}", d.path.string(), av_error(ret));
    if (d.format->pb) avio_closep(&d.format->pb);
    std::filesystem::rename(d.temporary, d.path);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(d.temporary, ec);
    throw;
  }
}

const std::string& VideoWriter::codec() const { return impl_->codec; }
int64_t VideoWriter::frames() const { return impl_->accepted; }

#else  // a build without FFmpeg (-DVISION_VIDEO=OFF)

struct VideoReader::Impl {};
struct VideoWriter::Impl {};

VideoReader::VideoReader(const std::string& source, const VideoReaderOptions&) {
  fail("video {}: this build of vision-cpp reads no video (configured with -DVISION_VIDEO=OFF)", source);
}
VideoReader::~VideoReader() = default;
const VideoInfo& VideoReader::info() const { fail("video: no video support in this build"); }
const std::vector<std::string>& VideoReader::warnings() const { fail("video: no video support in this build"); }
int64_t VideoReader::reconnects() const { return 0; }
bool VideoReader::read(VideoFrame&) { fail("video: no video support in this build"); }
VideoWriter::VideoWriter(const std::filesystem::path& path, int64_t, int64_t, double, const VideoWriterOptions&) {
  fail("video {}: this build of vision-cpp writes no video (configured with -DVISION_VIDEO=OFF)", path.string());
}
VideoWriter::~VideoWriter() = default;
void VideoWriter::write(const Image&) { fail("video: no video support in this build"); }
void VideoWriter::close() {}
const std::string& VideoWriter::codec() const { fail("video: no video support in this build"); }
int64_t VideoWriter::frames() const { return 0; }

#endif

}  // namespace vision::data
