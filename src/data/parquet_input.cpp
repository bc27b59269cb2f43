// ParquetTextReader over Apache Arrow's Parquet reader (see parquet_input.h). Built only when
// CMake found Arrow (ANVIL_HAVE_PARQUET); otherwise every entry point says how to get it.
#include "data/parquet_input.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "core/error.h"

#ifdef ANVIL_HAVE_PARQUET
#include <arrow/array.h>
#include <arrow/io/file.h>
#include <arrow/memory_pool.h>
#include <arrow/record_batch.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/properties.h>
#include <parquet/schema.h>
#endif

namespace anvil {
namespace {

#ifdef ANVIL_HAVE_PARQUET

// Arrow's messages may span lines; an error stays one line.
std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

#endif

}  // namespace

bool is_parquet_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ANVIL_CHECK(in.is_open(), "[prepare] {}: cannot open: {}", path, std::strerror(errno));
  char head[4] = {};
  in.read(head, sizeof(head));
  return in.gcount() == 4 && std::memcmp(head, "PAR1", 4) == 0;
}

#ifdef ANVIL_HAVE_PARQUET

bool parquet_supported() { return true; }

struct ParquetTextReader::Impl {
  std::string path;
  std::string text_field;
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::shared_ptr<parquet::FileMetaData> metadata;
  int column = -1;
  int group = -1;  // the open row group
  std::unique_ptr<arrow::RecordBatchReader> batches;

  template <typename T>
  T unwrap(arrow::Result<T> result, const char* what) {
    ANVIL_CHECK(result.ok(), "[prepare] {}: {}: {}", path, what,
                one_line(result.status().ToString()));
    return std::move(result).ValueUnsafe();
  }
};

ParquetTextReader::ParquetTextReader(const std::string& path, const std::string& text_field)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->text_field = text_field;
  auto file = impl_->unwrap(arrow::io::ReadableFile::Open(path), "cannot open");
  // Pages are read as they are decoded (a buffered stream) instead of each column chunk
  // whole, and nothing is pre-buffered: memory follows the batch, not the row group.
  parquet::ReaderProperties properties = parquet::default_reader_properties();
  properties.enable_buffered_stream();
  properties.set_buffer_size(int64_t{1} << 20);
  parquet::ArrowReaderProperties arrow_properties = parquet::default_arrow_reader_properties();
  arrow_properties.set_batch_size(kParquetBatchRows);
  arrow_properties.set_pre_buffer(false);
  arrow_properties.set_use_threads(false);
  try {
    parquet::arrow::FileReaderBuilder builder;
    const arrow::Status opened = builder.Open(file, properties);
    ANVIL_CHECK(opened.ok(), "[prepare] {}: not a readable Parquet file: {}", path,
                one_line(opened.ToString()));
    impl_->reader = impl_->unwrap(
        builder.memory_pool(arrow::default_memory_pool())->properties(arrow_properties)->Build(),
        "not a readable Parquet file");
    impl_->metadata = impl_->reader->parquet_reader()->metadata();
  } catch (const parquet::ParquetException& e) {
    ANVIL_FAIL("[prepare] {}: not a readable Parquet file: {}", path, one_line(e.what()));
  }
  const parquet::SchemaDescriptor* schema = impl_->metadata->schema();
  impl_->column = schema->ColumnIndex(text_field);
  if (impl_->column < 0) {
    std::vector<std::string> names;
    for (int c = 0; c < schema->num_columns(); ++c)
      names.push_back(schema->Column(c)->path()->ToDotString());
    ANVIL_FAIL("[prepare] {}: no column '{}' (columns: {}; choose one with --text-field)", path,
               text_field, fmt::join(names, ", "));
  }
  const parquet::ColumnDescriptor* descriptor = schema->Column(impl_->column);
  const auto logical = descriptor->logical_type();
  ANVIL_CHECK(descriptor->physical_type() == parquet::Type::BYTE_ARRAY &&
                  (logical == nullptr || logical->is_string() || logical->is_none()),
              "[prepare] {}: column '{}' holds {}, not strings", path, text_field,
              logical != nullptr && !logical->is_none()
                  ? logical->ToString()
                  : parquet::TypeToString(descriptor->physical_type()));
}

ParquetTextReader::~ParquetTextReader() = default;

int ParquetTextReader::row_groups() const { return impl_->metadata->num_row_groups(); }

int64_t ParquetTextReader::rows_in_group(int group) const {
  return impl_->metadata->RowGroup(group)->num_rows();
}

uint64_t ParquetTextReader::group_bytes(int group) const {
  return static_cast<uint64_t>(impl_->metadata->RowGroup(group)->total_compressed_size());
}

void ParquetTextReader::open_group(int group) {
  impl_->batches.reset();
  try {
    impl_->batches = impl_->unwrap(impl_->reader->GetRecordBatchReader({group}, {impl_->column}),
                                   "cannot read row group");
  } catch (const parquet::ParquetException& e) {
    ANVIL_FAIL("[prepare] {}: row group {}: {}", impl_->path, group, one_line(e.what()));
  }
  impl_->group = group;
}

bool ParquetTextReader::next_batch(ParquetRows& rows) {
  rows.texts.clear();
  rows.present.clear();
  if (impl_->batches == nullptr) return false;
  std::shared_ptr<arrow::RecordBatch> batch;
  try {
    const arrow::Status read = impl_->batches->ReadNext(&batch);
    ANVIL_CHECK(read.ok(), "[prepare] {}: row group {}: {}", impl_->path, impl_->group,
                one_line(read.ToString()));
  } catch (const parquet::ParquetException& e) {
    ANVIL_FAIL("[prepare] {}: row group {}: {}", impl_->path, impl_->group, one_line(e.what()));
  }
  if (batch == nullptr) {
    impl_->batches.reset();
    return false;
  }
  const std::shared_ptr<arrow::Array> chunk = batch->column(0);
  rows.texts.reserve(static_cast<size_t>(chunk->length()));
  for (int64_t i = 0; i < chunk->length(); ++i) {
    const bool present = chunk->IsValid(i);
    rows.present.push_back(present ? 1 : 0);
    if (!present) {
      rows.texts.emplace_back();
    } else if (chunk->type_id() == arrow::Type::LARGE_STRING) {
      rows.texts.emplace_back(static_cast<const arrow::LargeStringArray&>(*chunk).GetView(i));
    } else if (chunk->type_id() == arrow::Type::STRING) {
      rows.texts.emplace_back(static_cast<const arrow::StringArray&>(*chunk).GetView(i));
    } else if (chunk->type_id() == arrow::Type::BINARY) {
      rows.texts.emplace_back(static_cast<const arrow::BinaryArray&>(*chunk).GetView(i));
    } else {
      ANVIL_FAIL("[prepare] {}: column '{}' reads as {}, not strings", impl_->path,
                 impl_->text_field, chunk->type()->ToString());
    }
  }
  return true;
}

#else  // no Arrow in this build

bool parquet_supported() { return false; }

struct ParquetTextReader::Impl {};

ParquetTextReader::ParquetTextReader(const std::string& path, const std::string&) {
  ANVIL_FAIL("[prepare] {}: Parquet input needs a build with Apache Arrow (pip install pyarrow, "
             "then reconfigure)",
             path);
}

ParquetTextReader::~ParquetTextReader() = default;
int ParquetTextReader::row_groups() const { return 0; }
int64_t ParquetTextReader::rows_in_group(int) const { return 0; }
uint64_t ParquetTextReader::group_bytes(int) const { return 0; }
void ParquetTextReader::open_group(int) {}
bool ParquetTextReader::next_batch(ParquetRows&) { return false; }

#endif

}  // namespace anvil
