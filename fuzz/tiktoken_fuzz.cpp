// libFuzzer target for the tiktoken-format tokenizer.model loader (Meta Llama 3). A file that
// loads must build a tokenizer that encodes and decodes a short text; rejection must be an
// anvil::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_glue.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/loaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  anvil::fuzz::expect_error_or_success([&] {
    const std::string path = (anvil::fuzz::scratch_dir() / "tokenizer.model").string();
    anvil::tok::BpeTokenizerParts parts =
        anvil::tok::load_tiktoken(path, std::string(anvil::fuzz::as_text(data, size)));
    const anvil::tok::BpeTokenizer tokenizer(std::move(parts));
    const std::vector<int32_t> ids = tokenizer.encode("Hello world 123\n\xff!", true);
    tokenizer.decode(ids);
  });
  return 0;
}
