// libFuzzer target for the Hugging Face tokenizer.json loader (Tokenizer::load's JSON path). A
// file that loads must also build a tokenizer that encodes and decodes a short text without
// crashing; rejection must be an anvil::Error.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz_glue.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/loaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  anvil::fuzz::expect_error_or_success([&] {
    // A folder of its own, so no tokenizer_config.json is found beside the file.
    const std::string path = (anvil::fuzz::scratch_dir() / "tokenizer.json").string();
    anvil::tok::BpeTokenizerParts parts =
        anvil::tok::load_hf_json(path, std::string(anvil::fuzz::as_text(data, size)));
    const anvil::tok::BpeTokenizer tokenizer(std::move(parts));
    const std::vector<int32_t> ids = tokenizer.encode("Hello wörld 123 <s>\n\xff!", true);
    tokenizer.decode(ids);
  });
  return 0;
}
