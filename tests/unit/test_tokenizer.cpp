#include <gtest/gtest.h>

#include <fstream>

#include "base/error.h"
#include "test_support.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace sy {
namespace {

Llama2cTokenizer tok() { return Llama2cTokenizer::load(test::model_path("tok512.bin")); }

TEST(Tokenizer, EncodesLikeRunC) {
  auto t = tok();
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.encode("Once upon a time", true, false), (std::vector<int>{1, 403, 407, 261, 378}));
  EXPECT_EQ(t.encode("", true, true), (std::vector<int>{1, 2}));
}

TEST(Tokenizer, RoundTripsTextIncludingByteFallback) {
  auto t = tok();
  for (std::string s : {"Lily and Tim walked to the park.", "naïve café — 東京", "tabs\tand\nnewlines {}"}) {
    auto ids = t.encode(s, true, false);
    EXPECT_EQ(t.decode(std::vector<int>(ids.begin() + 1, ids.end())), s) << s;
  }
  // Byte tokens decode to their byte.
  EXPECT_EQ(t.decode_piece(0, 3 + 'A'), "A");
  EXPECT_THROW(t.decode_piece(0, 512), Error);
}

TEST(Tokenizer, TruncatedFileIsAClearError) {
  std::ifstream in(test::model_path("tok512.bin"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  try {
    Llama2cTokenizer::from_bytes(bytes.substr(0, bytes.size() - 3), "cut.bin");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut.bin: truncated tokenizer file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Llama2cTokenizer::from_bytes("", "empty.bin"), Error);
  EXPECT_THROW(Llama2cTokenizer::from_bytes(std::string("\xff\xff\xff\xff", 4), "neg.bin"), Error);
}

}  // namespace
}  // namespace sy
