// A GGUF file (llama.cpp's model format, versions 2 and 3): its metadata and
// tensor directory, read and checked up front; tensor data read on demand.
//
// GGUF files are untrusted input. Every length and count is checked against
// the bytes that remain before anything is allocated for it, every tensor's
// data must lie inside the file, and errors name the file and the key or
// tensor at fault. Nothing here knows about models: gguf_model.h builds the
// decoder graph, gguf_vocab.h the tokenizer, from what this reads.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace sy::gguf {

// ggml tensor types (the codes GGUF stores).
enum class TensorType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, BF16 = 30,
};
// "Q4_K", or "type 23" for a code this reader does not know.
std::string type_name(uint32_t type);
// Elements per block and bytes per block; nullopt for a type it cannot read.
struct BlockLayout {
  int64_t elements, bytes;
};
std::optional<BlockLayout> block_layout(uint32_t type);

// A metadata value: scalars widened, strings, and arrays of either.
struct Value;
using Array = std::vector<Value>;
struct Value {
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;
  uint32_t type = 0;  // the GGUF value type code it was stored as
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // GGUF order: dims[0] varies fastest (a weight's row length)
  uint32_t type = 0;
  uint64_t offset = 0;        // from the start of the data section
  uint64_t bytes = 0;
  int64_t numel() const;
  // Rows of dims[0] elements: dims[1] * dims[2] * ...
  int64_t rows() const;
};

// Where the bytes come from: a file, or memory (the fuzzer).
class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  virtual void read(uint64_t offset, uint64_t n, void* dst) const = 0;  // throws past the end
};

// Bytes in memory (the fuzzer, tests).
class MemorySource : public Source {
 public:
  explicit MemorySource(std::string bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_.size(); }
  void read(uint64_t offset, uint64_t n, void* dst) const override;

 private:
  std::string bytes_;
};

class File {
 public:
  static File open(const std::string& path);
  static File parse(std::shared_ptr<const Source> source, const std::string& label);
  // Whether the file starts with GGUF's magic (cheap: reads 4 bytes).
  static bool is_gguf(const std::string& path);

  const std::string& label() const { return label_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, Value>& metadata() const { return kv_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  const TensorInfo& tensor(const std::string& name) const;  // throws naming it
  // The raw bytes of a tensor's data (its stored, possibly quantized form).
  std::vector<uint8_t> read_raw(const TensorInfo& t) const;

  // Typed metadata access; each throws naming the key when the value has
  // another type. get_* return nullopt when the key is absent.
  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<std::vector<std::string>> get_strings(const std::string& key) const;
  std::optional<std::vector<double>> get_floats(const std::string& key) const;
  std::optional<std::vector<int64_t>> get_ints(const std::string& key) const;
  int64_t require_int(const std::string& key) const;  // throws naming a missing key
  std::string require_string(const std::string& key) const;

 private:
  std::string label_;
  uint32_t version_ = 0;
  std::map<std::string, Value> kv_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
  uint64_t data_offset_ = 0;
  std::shared_ptr<const Source> source_;
};

}  // namespace sy::gguf
