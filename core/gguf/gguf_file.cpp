#include "gguf/gguf_file.h"

#include <cstring>
#include <fstream>

#include "base/error.h"

namespace sy::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read little-endian
constexpr uint32_t kMaxDims = 4;
// Nesting limit for arrays of arrays (GGUF allows them; none of the keys a
// model needs uses more than one level).
constexpr int kMaxArrayDepth = 2;

enum ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

class FileSource : public Source {
 public:
  explicit FileSource(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    SY_CHECK_KIND(in_, ErrorKind::NotFound, path << ": cannot open the GGUF file");
    in_.seekg(0, std::ios::end);
    size_ = static_cast<uint64_t>(in_.tellg());
  }
  uint64_t size() const override { return size_; }
  void read(uint64_t offset, uint64_t n, void* dst) const override {
    SY_CHECK(offset <= size_ && n <= size_ - offset, path_ << ": the file ends at byte " << size_ << " (truncated?)");
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    SY_CHECK(in_.good() || n == 0, path_ << ": reading " << n << " bytes at " << offset << " failed");
  }

 private:
  std::string path_;
  mutable std::ifstream in_;
  uint64_t size_ = 0;
};

// Sequential reads with bounds checks; every error names what was being read.
class Cursor {
 public:
  explicit Cursor(const Source& src) : src_(src) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return src_.size() - pos_; }
  void need(uint64_t n, const std::string& what) const {
    SY_CHECK(n <= left(), "truncated: " << what << " needs " << n << " bytes at offset " << pos_ << ", the file has "
                                 << left() << " left");
  }
  template <typename T>
  T pod(const std::string& what) {
    need(sizeof(T), what);
    T v;
    src_.read(pos_, sizeof(T), &v);
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const std::string& what) {
    const auto n = pod<uint64_t>(what + " (length)");
    need(n, what);
    std::string s(static_cast<size_t>(n), '\0');
    src_.read(pos_, n, s.data());
    pos_ += n;
    return s;
  }

 private:
  const Source& src_;
  uint64_t pos_ = 0;
};

uint64_t scalar_size(uint32_t t) {
  switch (t) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

Value read_value(Cursor& c, uint32_t type, const std::string& key, int depth) {
  Value out;
  out.type = type;
  switch (type) {
    case kU8: out.v = uint64_t{c.pod<uint8_t>(key)}; break;
    case kI8: out.v = int64_t{c.pod<int8_t>(key)}; break;
    case kU16: out.v = uint64_t{c.pod<uint16_t>(key)}; break;
    case kI16: out.v = int64_t{c.pod<int16_t>(key)}; break;
    case kU32: out.v = uint64_t{c.pod<uint32_t>(key)}; break;
    case kI32: out.v = int64_t{c.pod<int32_t>(key)}; break;
    case kU64: out.v = c.pod<uint64_t>(key); break;
    case kI64: out.v = c.pod<int64_t>(key); break;
    case kF32: out.v = double{c.pod<float>(key)}; break;
    case kF64: out.v = c.pod<double>(key); break;
    case kBool: {
      const auto b = c.pod<uint8_t>(key);
      SY_CHECK(b <= 1, "metadata '" << key << "': a bool stored as " << int{b});
      out.v = b != 0;
      break;
    }
    case kString: out.v = c.str("metadata '" + key + "'"); break;
    case kArray: {
      SY_CHECK(depth < kMaxArrayDepth, "metadata '" << key << "': arrays nested deeper than " << kMaxArrayDepth);
      const auto elem = c.pod<uint32_t>(key + " (array type)");
      const auto n = c.pod<uint64_t>(key + " (array length)");
      // Each element takes at least one byte (a string at least 8): a count
      // the rest of the file cannot hold is refused before allocating.
      const uint64_t min_size = elem == kString ? 8 : elem == kArray ? 12 : scalar_size(elem);
      SY_CHECK(min_size > 0, "metadata '" << key << "': array of unknown value type " << elem);
      SY_CHECK(n <= c.left() / min_size, "metadata '" << key << "': an array of " << n << " elements does not fit in the "
                                                      << c.left() << " bytes left");
      Array a;
      a.reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i) a.push_back(read_value(c, elem, key, depth + 1));
      out.v = std::move(a);
      break;
    }
    default: SY_THROW("metadata '" << key << "' has unknown value type " << type);
  }
  return out;
}

const char* value_type_name(uint32_t t) {
  static const char* names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                "bool", "string", "array", "uint64", "int64", "float64"};
  return t < sizeof(names) / sizeof(names[0]) ? names[t] : "unknown";
}

std::optional<int64_t> as_int(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) {
    if (*u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v.v)) return *i;
  if (const auto* b = std::get_if<bool>(&v.v)) return *b ? 1 : 0;
  return std::nullopt;
}

std::optional<double> as_float(const Value& v) {
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  if (auto i = as_int(v)) return static_cast<double>(*i);
  return std::nullopt;
}

}  // namespace

std::string type_name(uint32_t type) {
  switch (static_cast<TensorType>(type)) {
    case TensorType::F32: return "F32";
    case TensorType::F16: return "F16";
    case TensorType::BF16: return "BF16";
    case TensorType::Q4_0: return "Q4_0";
    case TensorType::Q4_1: return "Q4_1";
    case TensorType::Q5_0: return "Q5_0";
    case TensorType::Q5_1: return "Q5_1";
    case TensorType::Q8_0: return "Q8_0";
    case TensorType::Q8_1: return "Q8_1";
    case TensorType::Q2_K: return "Q2_K";
    case TensorType::Q3_K: return "Q3_K";
    case TensorType::Q4_K: return "Q4_K";
    case TensorType::Q5_K: return "Q5_K";
    case TensorType::Q6_K: return "Q6_K";
    case TensorType::Q8_K: return "Q8_K";
  }
  return "type " + std::to_string(type);
}

std::optional<BlockLayout> block_layout(uint32_t type) {
  switch (static_cast<TensorType>(type)) {
    case TensorType::F32: return BlockLayout{1, 4};
    case TensorType::F16: case TensorType::BF16: return BlockLayout{1, 2};
    case TensorType::Q4_0: return BlockLayout{32, 18};
    case TensorType::Q4_1: return BlockLayout{32, 20};
    case TensorType::Q5_0: return BlockLayout{32, 22};
    case TensorType::Q5_1: return BlockLayout{32, 24};
    case TensorType::Q8_0: return BlockLayout{32, 34};
    case TensorType::Q8_1: return BlockLayout{32, 36};
    case TensorType::Q2_K: return BlockLayout{256, 84};
    case TensorType::Q3_K: return BlockLayout{256, 110};
    case TensorType::Q4_K: return BlockLayout{256, 144};
    case TensorType::Q5_K: return BlockLayout{256, 176};
    case TensorType::Q6_K: return BlockLayout{256, 210};
    case TensorType::Q8_K: return BlockLayout{256, 292};
  }
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t TensorInfo::rows() const { return dims.empty() || dims[0] == 0 ? 0 : numel() / dims[0]; }

void MemorySource::read(uint64_t offset, uint64_t n, void* dst) const {
  SY_CHECK(offset <= bytes_.size() && n <= bytes_.size() - offset, "read past the end (" << bytes_.size() << " bytes)");
  if (n) std::memcpy(dst, bytes_.data() + offset, n);
}

bool File::is_gguf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint32_t magic = 0;
  return in && in.read(reinterpret_cast<char*>(&magic), 4) && magic == kMagic;
}

File File::open(const std::string& path) { return parse(std::make_shared<FileSource>(path), path); }

File File::parse(std::shared_ptr<const Source> source, const std::string& label) {
  File f;
  f.label_ = label;
  f.source_ = std::move(source);
  Cursor c(*f.source_);
  try {
    SY_CHECK(c.pod<uint32_t>("the magic") == kMagic, "not a GGUF file (the magic is not 'GGUF')");
    f.version_ = c.pod<uint32_t>("the version");
    SY_CHECK(f.version_ == 2 || f.version_ == 3, "GGUF version " << f.version_ << " is not supported (2 and 3 are)");
    const auto n_tensors = c.pod<uint64_t>("the tensor count");
    const auto n_kv = c.pod<uint64_t>("the metadata count");
    // A key takes at least 12 bytes, a tensor entry at least 28.
    SY_CHECK(n_kv <= c.left() / 12, "the header claims " << n_kv << " metadata entries, more than the file can hold");
    SY_CHECK(n_tensors <= c.left() / 28, "the header claims " << n_tensors << " tensors, more than the file can hold");
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key = c.str("metadata key " + std::to_string(i));
      const auto type = c.pod<uint32_t>("metadata '" + key + "' (type)");
      Value v = read_value(c, type, key, 0);
      SY_CHECK(f.kv_.emplace(key, std::move(v)).second, "metadata key '" << key << "' appears twice");
    }
    uint64_t alignment = 32;
    if (auto a = f.get_int("general.alignment")) {
      SY_CHECK(*a > 0 && *a <= (1 << 20) && (*a & (*a - 1)) == 0, "general.alignment " << *a << " is not a power of two");
      alignment = static_cast<uint64_t>(*a);
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
      TensorInfo t;
      t.name = c.str("tensor " + std::to_string(i) + " name");
      const auto n_dims = c.pod<uint32_t>("tensor '" + t.name + "' rank");
      SY_CHECK(n_dims >= 1 && n_dims <= kMaxDims, "tensor '" << t.name << "' has rank " << n_dims << " (1.." << kMaxDims << ")");
      int64_t numel = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        const auto dim = c.pod<uint64_t>("tensor '" + t.name + "' dims");
        SY_CHECK(dim <= (uint64_t{1} << 40) && (dim == 0 || static_cast<uint64_t>(numel) <= (uint64_t{1} << 42) / dim),
                 "tensor '" << t.name << "' has more elements than this reader accepts (dim " << dim << ")");
        numel *= static_cast<int64_t>(dim);
        t.dims.push_back(static_cast<int64_t>(dim));
      }
      t.type = c.pod<uint32_t>("tensor '" + t.name + "' type");
      t.offset = c.pod<uint64_t>("tensor '" + t.name + "' offset");
      const auto layout = block_layout(t.type);
      SY_CHECK_KIND(layout, ErrorKind::Unsupported,
                    "tensor '" << t.name << "' has ggml type " << type_name(t.type)
                               << ", which this reader does not support (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K)");
      SY_CHECK(t.dims[0] % layout->elements == 0, "tensor '" << t.name << "': rows of " << t.dims[0] << " elements do not split into "
                                                              << type_name(t.type) << " blocks of " << layout->elements);
      t.bytes = static_cast<uint64_t>(numel / layout->elements * layout->bytes);
      SY_CHECK(t.offset % alignment == 0, "tensor '" << t.name << "' starts at offset " << t.offset << ", not a multiple of the alignment " << alignment);
      SY_CHECK(f.tensor_index_.emplace(t.name, f.tensors_.size()).second, "tensor '" << t.name << "' appears twice");
      f.tensors_.push_back(std::move(t));
    }
    f.data_offset_ = (c.pos() + alignment - 1) / alignment * alignment;
    const uint64_t size = f.source_->size();
    for (const TensorInfo& t : f.tensors_)
      SY_CHECK(f.data_offset_ <= size && t.offset <= size - f.data_offset_ && t.bytes <= size - f.data_offset_ - t.offset,
               "tensor '" << t.name << "' (" << t.bytes << " bytes at data offset " << t.offset << ") runs past the end of the file ("
                          << size << " bytes; truncated?)");
  } catch (const Error& e) {
    SY_THROW_KIND(e.kind(), label << ": " << e.what());
  }
  return f;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  SY_CHECK(t, label_ << ": no tensor '" << name << "'");
  return *t;
}

std::vector<uint8_t> File::read_raw(const TensorInfo& t) const {
  std::vector<uint8_t> out(static_cast<size_t>(t.bytes));
  source_->read(data_offset_ + t.offset, t.bytes, out.data());
  return out;
}

std::optional<int64_t> File::get_int(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  auto v = as_int(it->second);
  SY_CHECK(v, label_ << ": metadata '" << key << "' is a " << value_type_name(it->second.type) << ", not an integer");
  return v;
}

std::optional<double> File::get_float(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  auto v = as_float(it->second);
  SY_CHECK(v, label_ << ": metadata '" << key << "' is a " << value_type_name(it->second.type) << ", not a number");
  return v;
}

std::optional<bool> File::get_bool(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&it->second.v)) return *b;
  auto v = as_int(it->second);
  SY_CHECK(v, label_ << ": metadata '" << key << "' is a " << value_type_name(it->second.type) << ", not a bool");
  return *v != 0;
}

std::optional<std::string> File::get_string(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  const auto* s = std::get_if<std::string>(&it->second.v);
  SY_CHECK(s, label_ << ": metadata '" << key << "' is a " << value_type_name(it->second.type) << ", not a string");
  return *s;
}

std::optional<std::vector<std::string>> File::get_strings(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  const auto* a = std::get_if<Array>(&it->second.v);
  SY_CHECK(a, label_ << ": metadata '" << key << "' is a " << value_type_name(it->second.type) << ", not an array");
  std::vector<std::string> out;
  out.reserve(a->size());
  for (const Value& v : *a) {
    const auto* s = std::get_if<std::string>(&v.v);
    SY_CHECK(s, label_ << ": metadata '" << key << "' holds a " << value_type_name(v.type) << ", not strings");
    out.push_back(*s);
  }
  return out;
}

std::optional<std::vector<double>> File::get_floats(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  const auto* a = std::get_if<Array>(&it->second.v);
  SY_CHECK(a, label_ << ": metadata '" << key << "' is a " << value_type_name(it->second.type) << ", not an array");
  std::vector<double> out;
  out.reserve(a->size());
  for (const Value& v : *a) {
    auto d = as_float(v);
    SY_CHECK(d, label_ << ": metadata '" << key << "' holds a " << value_type_name(v.type) << ", not numbers");
    out.push_back(*d);
  }
  return out;
}

std::optional<std::vector<int64_t>> File::get_ints(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  const auto* a = std::get_if<Array>(&it->second.v);
  if (!a) {  // a per-layer key may hold one value for every layer
    auto one = as_int(it->second);
    SY_CHECK(one, label_ << ": metadata '" << key << "' is a " << value_type_name(it->second.type) << ", not integers");
    return std::vector<int64_t>{*one};
  }
  std::vector<int64_t> out;
  out.reserve(a->size());
  for (const Value& v : *a) {
    auto i = as_int(v);
    SY_CHECK(i, label_ << ": metadata '" << key << "' holds a " << value_type_name(v.type) << ", not integers");
    out.push_back(*i);
  }
  return out;
}

int64_t File::require_int(const std::string& key) const {
  auto v = get_int(key);
  SY_CHECK(v, label_ << ": metadata '" << key << "' is missing");
  return *v;
}

std::string File::require_string(const std::string& key) const {
  auto v = get_string(key);
  SY_CHECK(v, label_ << ": metadata '" << key << "' is missing");
  return *v;
}

}  // namespace sy::gguf
