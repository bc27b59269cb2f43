// DecompressingBuffer and compression detection (see compressed_input.h). One step function
// per format turns some compressed bytes into some plain ones; the buffer's loop refills the
// input, tells a clean end (every stream closed) from a truncated one, and turns a decoder's
// complaint into one message with the compressed byte offset.
#include "data/compressed_input.h"

#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace anvil {
namespace {

constexpr size_t kInputChunk = size_t{1} << 20;
constexpr size_t kOutputChunk = size_t{1} << 20;

constexpr unsigned char kGzipMagic[] = {0x1f, 0x8b};
constexpr unsigned char kZstdMagic[] = {0x28, 0xb5, 0x2f, 0xfd};
constexpr unsigned char kXzMagic[] = {0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00};

template <size_t N>
bool starts_with(const char* head, size_t size, const unsigned char (&magic)[N]) {
  return size >= N && std::memcmp(head, magic, N) == 0;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What one decoder step did: input consumed, output produced, and an error if any.
struct Step {
  size_t consumed = 0;
  size_t produced = 0;
  std::string error;
};

}  // namespace

Compression detect_compression(const char* head, size_t size) {
  if (starts_with(head, size, kGzipMagic)) return Compression::gzip;
  if (starts_with(head, size, kZstdMagic)) return Compression::zstd;
  if (starts_with(head, size, kXzMagic)) return Compression::xz;
  return Compression::none;
}

Compression detect_compression(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ANVIL_CHECK(in.is_open(), "[data] {}: cannot open: {}", path, std::strerror(errno));
  char head[sizeof(kXzMagic)] = {};
  in.read(head, sizeof(head));
  return detect_compression(head, static_cast<size_t>(in.gcount()));
}

const char* compression_name(Compression compression) {
  switch (compression) {
    case Compression::gzip: return "gzip";
    case Compression::zstd: return "zstd";
    case Compression::xz: return "xz";
    case Compression::none: break;
  }
  return "none";
}

std::string strip_compression_suffix(const std::string& path) {
  for (const char* suffix : {".gz", ".zst", ".zstd", ".xz"}) {
    if (ends_with(path, suffix)) return path.substr(0, path.size() - std::strlen(suffix));
  }
  return path;
}

// The decoder of one format. `at_boundary` is true where the input may end cleanly: before
// the first stream and after each complete one.
struct DecompressingBuffer::Decoder {
  Compression kind = Compression::none;
  bool at_boundary = true;
  z_stream gzip{};
  ZSTD_DStream* zstd = nullptr;
  lzma_stream xz = LZMA_STREAM_INIT;

  explicit Decoder(Compression compression) : kind(compression) {
    switch (kind) {
      case Compression::gzip:
        // 15 + 16: a gzip wrapper (not zlib's), the largest window.
        ANVIL_CHECK(inflateInit2(&gzip, 15 + 16) == Z_OK, "[data] zlib: cannot start");
        break;
      case Compression::zstd:
        zstd = ZSTD_createDStream();
        ANVIL_CHECK(zstd != nullptr && !ZSTD_isError(ZSTD_initDStream(zstd)),
                    "[data] zstd: cannot start");
        break;
      case Compression::xz:
        ANVIL_CHECK(lzma_stream_decoder(&xz, UINT64_MAX, LZMA_CONCATENATED) == LZMA_OK,
                    "[data] xz: cannot start");
        break;
      case Compression::none: break;
    }
  }
  ~Decoder() {
    if (kind == Compression::gzip) inflateEnd(&gzip);
    if (zstd != nullptr) ZSTD_freeDStream(zstd);
    if (kind == Compression::xz) lzma_end(&xz);
  }
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Decodes from in[0, in_size) into out[0, out_size); `last` says no input follows.
  Step step(const char* in, size_t in_size, char* out, size_t out_size, bool last) {
    switch (kind) {
      case Compression::gzip: return step_gzip(in, in_size, out, out_size, last);
      case Compression::zstd: return step_zstd(in, in_size, out, out_size);
      case Compression::xz: return step_xz(in, in_size, out, out_size, last);
      case Compression::none: break;
    }
    const size_t n = std::min(in_size, out_size);
    std::memcpy(out, in, n);
    return Step{n, n, {}};
  }

  Step step_gzip(const char* in, size_t in_size, char* out, size_t out_size, bool last) {
    if (at_boundary && in_size > 0) {
      // Another member follows (concatenated files): it must be gzip too.
      if (in_size < sizeof(kGzipMagic) && !last) return Step{};
      if (!starts_with(in, in_size, kGzipMagic)) {
        return Step{0, 0, "bytes after the last gzip member that are not another member"};
      }
      inflateReset(&gzip);
    }
    gzip.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in));
    gzip.avail_in = static_cast<uInt>(in_size);
    gzip.next_out = reinterpret_cast<Bytef*>(out);
    gzip.avail_out = static_cast<uInt>(out_size);
    const int rc = inflate(&gzip, Z_NO_FLUSH);
    Step s{in_size - gzip.avail_in, out_size - gzip.avail_out, {}};
    if (rc == Z_STREAM_END) {
      at_boundary = true;
    } else if (rc == Z_OK || rc == Z_BUF_ERROR) {
      at_boundary = at_boundary && s.consumed == 0 && s.produced == 0;
    } else {
      s.error = gzip.msg != nullptr ? gzip.msg : fmt::format("zlib error {}", rc);
    }
    return s;
  }

  Step step_zstd(const char* in, size_t in_size, char* out, size_t out_size) {
    ZSTD_inBuffer input{in, in_size, 0};
    ZSTD_outBuffer output{out, out_size, 0};
    const size_t rc = ZSTD_decompressStream(zstd, &output, &input);
    Step s{input.pos, output.pos, {}};
    if (ZSTD_isError(rc)) {
      s.error = ZSTD_getErrorName(rc);
    } else if (s.consumed > 0 || s.produced > 0) {
      at_boundary = rc == 0;  // 0: a frame ended and everything it holds was flushed
    }
    return s;
  }

  Step step_xz(const char* in, size_t in_size, char* out, size_t out_size, bool last) {
    xz.next_in = reinterpret_cast<const uint8_t*>(in);
    xz.avail_in = in_size;
    xz.next_out = reinterpret_cast<uint8_t*>(out);
    xz.avail_out = out_size;
    const lzma_ret rc = lzma_code(&xz, last ? LZMA_FINISH : LZMA_RUN);
    Step s{in_size - xz.avail_in, out_size - xz.avail_out, {}};
    if (rc == LZMA_STREAM_END) {
      at_boundary = true;
    } else if (rc == LZMA_OK) {
      at_boundary = false;
    } else if (rc == LZMA_BUF_ERROR && last) {
      at_boundary = false;  // no progress at the end of the input: truncated
    } else if (rc != LZMA_BUF_ERROR) {
      s.error = fmt::format("liblzma error {}", static_cast<int>(rc));
    }
    return s;
  }
};

DecompressingBuffer::DecompressingBuffer(const std::string& path, uint64_t start)
    : path_(path), file_(path, std::ios::binary), in_(kInputChunk), out_(kOutputChunk) {
  ANVIL_CHECK(file_.is_open(), "[data] {}: cannot open: {}", path, std::strerror(errno));
  refill();
  compression_ = detect_compression(in_.data(), in_end_);
  if (start > 0) {
    ANVIL_CHECK(compression_ == Compression::none,
                "[data] {}: a {} stream cannot be read from byte {}", path,
                compression_name(compression_), start);
    file_.clear();
    file_.seekg(static_cast<std::streamoff>(start));
    ANVIL_CHECK(file_.good(), "[data] {}: cannot seek to byte {}", path, start);
    in_begin_ = in_end_ = 0;
    file_offset_ = start;
    file_done_ = false;
    refill();
  }
  decoder_ = std::make_unique<Decoder>(compression_);
  setg(out_.data(), out_.data(), out_.data());
}

DecompressingBuffer::~DecompressingBuffer() = default;

bool DecompressingBuffer::refill() {
  if (file_done_) return false;
  if (in_begin_ > 0) {  // keep the unread bytes in front
    std::memmove(in_.data(), in_.data() + in_begin_, in_end_ - in_begin_);
    in_end_ -= in_begin_;
    in_begin_ = 0;
  }
  if (in_end_ == in_.size()) return true;  // full of unread input already
  file_.read(in_.data() + in_end_, static_cast<std::streamsize>(in_.size() - in_end_));
  const auto got = static_cast<size_t>(file_.gcount());
  in_end_ += got;
  file_offset_ += got;
  if (file_.bad()) {
    error_ = fmt::format("read error at byte {}: {}", file_offset_, std::strerror(errno));
    file_done_ = true;
  } else if (got == 0 || file_.eof()) {
    file_done_ = true;
  }
  return got > 0;
}

size_t DecompressingBuffer::decode() {
  while (error_.empty()) {
    if (in_begin_ == in_end_) refill();
    const Step s = decoder_->step(in_.data() + in_begin_, in_end_ - in_begin_, out_.data(),
                                  out_.size(), file_done_);
    in_begin_ += s.consumed;
    const uint64_t offset = file_offset_ - (in_end_ - in_begin_);
    if (!s.error.empty()) {
      error_ = fmt::format("corrupt {} stream at byte {}: {}", compression_name(compression_),
                           offset, s.error);
      return 0;
    }
    if (s.produced > 0) return s.produced;
    if (s.consumed > 0) continue;
    if (!file_done_) {  // the decoder needs more input than is buffered
      refill();
      continue;
    }
    if (decoder_->at_boundary && in_begin_ == in_end_) return 0;  // a clean end
    error_ = fmt::format("truncated {} stream: the file ends at byte {} inside a stream",
                         compression_name(compression_), offset);
  }
  return 0;
}

std::string_view DecompressingBuffer::available() {
  if (gptr() == egptr() && traits_type::eq_int_type(underflow(), traits_type::eof())) return {};
  return {gptr(), static_cast<size_t>(egptr() - gptr())};
}

DecompressingBuffer::int_type DecompressingBuffer::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  const size_t produced = decode();
  if (produced == 0) return traits_type::eof();
  setg(out_.data(), out_.data(), out_.data() + produced);
  return traits_type::to_int_type(*gptr());
}

}  // namespace anvil
