#include "plugin_host/plugin_library.h"
#include "plugin_host/components.h"

#include <dlfcn.h>
#include <openssl/evp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "plugin_host/host_api.h"

namespace sy {

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SY_CHECK(in, path << ": cannot open the file to check its sha256");
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  SY_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "sha256: OpenSSL initialisation failed");
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &len);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

namespace {
// Opening, initialising, shutting down and closing plugin libraries happen
// one at a time in the process. Two sessions may load the same library on
// two threads: its init (a raw C one may fill statics) then never runs
// concurrently, and the last dlclose, which runs the library's static
// destructors, is ordered after every other session's use of it (the
// loader's own reference counting is invisible to ThreadSanitizer, which
// reported exactly that hand-off).
std::recursive_mutex& loader_mutex() {
  static std::recursive_mutex m;
  return m;
}
}  // namespace

// The CUDA runtime registers a library's kernels when the library is opened
// and unregisters them when it is closed; a library opened again after that
// cannot launch them ("device kernel image is invalid", or a hang in the
// launch stub), which the first GPU run showed when a CPU session closed the
// fused plugin before a CUDA session opened it. So a library that links the
// runtime (statically or not: its handle finds the registration entry) is
// pinned in memory with RTLD_NODELETE. Its shutdown still runs when the last
// holder lets go, and the next load runs its init again, as a second session
// sharing it does. If the pin cannot be taken, the library keeps closing on
// its last holder, as before.
void PluginLibrary::pin_if_it_links_the_cuda_runtime(PluginLibrary& p) {
  void* handle = p.lib_.native();
  if (!handle || !dlsym(handle, "__cudaRegisterFatBinary")) return;
  if (void* pin = dlopen(p.path_.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD | RTLD_NODELETE)) {
    p.pinned_ = true;
    dlclose(pin);  // drops the reference dlopen added; NODELETE stays with the library
  }
}

std::shared_ptr<PluginLibrary> PluginLibrary::load(const std::string& path, const std::optional<std::string>& sha256) {
  std::shared_ptr<PluginLibrary> p(new PluginLibrary());
  p->path_ = path;
  SY_CHECK_KIND(std::filesystem::exists(path), ErrorKind::NotFound, "plugin " << path << ": no such file");
  // Devices (/dev/zero), FIFOs and directories would be read forever or fail
  // obscurely in dlopen: a plugin is a regular file of bounded size.
  std::error_code ec;
  SY_CHECK(std::filesystem::is_regular_file(path, ec), "plugin " << path << ": not a regular file");
  const auto size = std::filesystem::file_size(path, ec);
  SY_CHECK(!ec && size <= (uintmax_t{1} << 30), "plugin " << path << ": larger than 1 GiB");
  p->sha256_ = sha256_file(path);
  if (sha256) {
    std::string want = *sha256;
    std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    SY_CHECK(want == p->sha256_, "plugin " << path << ": sha256 mismatch: the manifest expects " << want
                                           << " but the file has " << p->sha256_
                                           << " (the library changed since the manifest was written)");
  }
  std::lock_guard<std::recursive_mutex> lock(loader_mutex());  // released before p on a throw
  try {
    p->lib_.load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    SY_THROW("plugin " << path << ": cannot load the library: " << e.what());
  }
  pin_if_it_links_the_cuda_runtime(*p);
  SY_CHECK(p->lib_.has(SY_PLUGIN_ENTRY_SYMBOL), "plugin " << path << ": no exported entry point '" SY_PLUGIN_ENTRY_SYMBOL
                                                          << "' (not a Switchyard plugin, or built without "
                                                             "SY_PLUGIN_EXPORT / with hidden visibility)");
  auto init = p->lib_.get<const sy_plugin_info*(const sy_host_api*)>(SY_PLUGIN_ENTRY_SYMBOL);
  PluginCall call(std::filesystem::path(path).filename().string(), nullptr);
  try {
    p->info_ = init(host_api());
  } catch (const std::exception& e) {
    SY_THROW("plugin " << path << ": its init threw a C++ exception across the ABI: " << e.what());
  } catch (...) {
    SY_THROW("plugin " << path << ": its init threw across the ABI");
  }
  if (!p->info_) {
    std::string msg = take_plugin_error();
    SY_THROW("plugin " << path << ": " SY_PLUGIN_ENTRY_SYMBOL " returned no description"
                       << (msg.empty() ? std::string() : ": " + msg));
  }
  p->validate();
  return p;
}

namespace {

template <typename Desc>
void check_desc(const Desc* d, const std::string& where, size_t min_size) {
  SY_CHECK(d, where << " is null");
  SY_CHECK(d->struct_size >= min_size, where << " is smaller (" << d->struct_size << " bytes) than ABI 1.0's ("
                                             << min_size << " bytes)");
  SY_CHECK(d->name && *d->name, where << " has no name");
  SY_CHECK(d->version, where << " ('" << d->name << "') has no version");
}

}  // namespace

void PluginLibrary::validate() {
  const sy_plugin_info* i = info_;
  // Only the first three fields are stable across major versions: check
  // them before reading anything else.
  SY_CHECK(i->struct_size >= offsetof(sy_plugin_info, abi_minor) + sizeof(i->abi_minor),
           "plugin " << path_ << ": malformed description (struct_size " << i->struct_size << ")");
  abi_major_ = i->abi_major;
  abi_minor_ = i->abi_minor;
  SY_CHECK(abi_major_ == SY_PLUGIN_ABI_MAJOR,
           "plugin " << path_ << " was built for Switchyard plugin ABI " << abi_major_ << "." << abi_minor_
                     << ", but this host implements ABI " << SY_PLUGIN_ABI_MAJOR << "." << SY_PLUGIN_ABI_MINOR
                     << ": major versions must match; rebuild the plugin against a " << SY_PLUGIN_ABI_MAJOR
                     << ".x SDK");
  SY_CHECK(SY_HAS_FIELD(i, sy_plugin_info, shutdown),
           "plugin " << path_ << ": description is smaller (" << i->struct_size << " bytes) than ABI 1.0's");
  SY_CHECK(i->name && *i->name, "plugin " << path_ << ": description has no name");
  name_ = i->name;
  version_ = i->version ? i->version : "";
  description_ = i->description ? i->description : "";
  std::string who = "plugin '" + name_ + "' (" + path_ + ")";
  auto check_array = [&](const void* arr, int32_t n, const char* kind) {
    SY_CHECK(n >= 0 && (n == 0 || arr), who << ": " << kind << " list is missing or has a negative count");
  };
  check_array(i->passes, i->num_passes, "pass");
  check_array(i->kernels, i->num_kernels, "kernel");
  check_array(i->schedulers, i->num_schedulers, "scheduler");
  check_array(i->caches, i->num_caches, "cache manager");
  check_array(i->drafters, i->num_drafters, "drafter");
  for (int32_t k = 0; k < i->num_passes; ++k) {
    const sy_pass_desc* d = i->passes[k];
    check_desc(d, who + ": pass " + std::to_string(k), offsetof(sy_pass_desc, run) + sizeof(d->run));
    SY_CHECK(d->run, who << ": pass '" << d->name << "' has no run function");
  }
  for (int32_t k = 0; k < i->num_kernels; ++k) {
    const sy_kernel_desc* d = i->kernels[k];
    check_desc(d, who + ": kernel " + std::to_string(k), offsetof(sy_kernel_desc, destroy) + sizeof(d->destroy));
    SY_CHECK(d->op_type && *d->op_type && d->domain, who << ": kernel '" << d->name << "' has no domain/op type");
    SY_CHECK(d->create && d->compute && d->destroy, who << ": kernel '" << d->name << "' lacks create/compute/destroy");
    SY_CHECK(d->device == SY_DEVICE_CPU || d->device == SY_DEVICE_CUDA, who << ": kernel '" << d->name << "' has unknown device " << d->device);
    SY_CHECK(d->num_dtypes >= 0 && (d->num_dtypes == 0 || d->dtypes), who << ": kernel '" << d->name << "' has a bad dtype list");
  }
  for (int32_t k = 0; k < i->num_schedulers; ++k) {
    const sy_scheduler_desc* d = i->schedulers[k];
    check_desc(d, who + ": scheduler " + std::to_string(k), offsetof(sy_scheduler_desc, destroy) + sizeof(d->destroy));
    SY_CHECK(d->create && d->plan && d->destroy, who << ": scheduler '" << d->name << "' lacks create/plan/destroy");
    scheduler_element_sizes(d, who);  // refuses element sizes below 1.0's
  }
  for (int32_t k = 0; k < i->num_caches; ++k) {
    const sy_cache_desc* d = i->caches[k];
    check_desc(d, who + ": cache manager " + std::to_string(k), offsetof(sy_cache_desc, destroy) + sizeof(d->destroy));
    // Every function the step engine calls unconditionally is required;
    // match_prefix, commit, truncate, fork and stats are optional (NULL: no
    // prefix sharing, nothing to record, no speculative rollback, no forks, no stats).
    const std::pair<bool, const char*> required[] = {{d->create != nullptr, "create"},   {d->allocate != nullptr, "allocate"},
                                                     {d->release != nullptr, "release"}, {d->block_table != nullptr, "block_table"},
                                                     {d->storage != nullptr, "storage"}, {d->destroy != nullptr, "destroy"}};
    for (const auto& [present, fn] : required)
      SY_CHECK(present, who << ": cache manager '" << d->name << "' lacks the required function " << fn);
  }
  for (int32_t k = 0; k < i->num_drafters; ++k) {
    const sy_drafter_desc* d = i->drafters[k];
    check_desc(d, who + ": drafter " + std::to_string(k), offsetof(sy_drafter_desc, destroy) + sizeof(d->destroy));
    SY_CHECK(d->create && d->propose && d->destroy, who << ": drafter '" << d->name << "' lacks create/propose/destroy");
  }
  // 1.4: logits processors (a description from an older minor has none).
  if (SY_HAS_FIELD(i, sy_plugin_info, num_logits_processors)) {
    check_array(i->logits_processors, i->num_logits_processors, "logits processor");
    num_logits_processors_ = i->num_logits_processors;
  }
  for (int32_t k = 0; k < num_logits_processors_; ++k) {
    const sy_logits_processor_desc* d = i->logits_processors[k];
    check_desc(d, who + ": logits processor " + std::to_string(k), offsetof(sy_logits_processor_desc, destroy) + sizeof(d->destroy));
    const std::pair<bool, const char*> required[] = {
        {d->create != nullptr, "create"}, {d->begin != nullptr, "begin"}, {d->fill_masks != nullptr, "fill_masks"},
        {d->accept != nullptr, "accept"}, {d->rollback != nullptr, "rollback"}, {d->query != nullptr, "query"},
        {d->end != nullptr, "end"},       {d->destroy != nullptr, "destroy"}};
    for (const auto& [present, fn] : required)
      SY_CHECK(present, who << ": logits processor '" << d->name << "' lacks the required function " << fn);
  }
}

PluginLibrary::~PluginLibrary() {
  std::lock_guard<std::recursive_mutex> lock(loader_mutex());
  if (info_ && SY_HAS_FIELD(info_, sy_plugin_info, shutdown) && info_->shutdown && abi_major_ == SY_PLUGIN_ABI_MAJOR) {
    PluginCall call(name_, nullptr);
    try {
      info_->shutdown(info_->plugin_data);
    } catch (...) {
      // A throwing shutdown must not take the process down; nothing to report to.
    }
  }
  lib_.unload();  // under the lock (see loader_mutex)
}

}  // namespace sy
