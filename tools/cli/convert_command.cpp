// switchyard convert: a GGUF file as a standard model folder (model.onnx with
// external data, config.json, generation_config.json, tokenizer.json,
// tokenizer_config.json with the chat template) that the engine, onnxruntime
// and transformers' tokenizers read.
#include <cstdio>
#include <iostream>

#include "cli_support.h"
#include "commands.h"

namespace sy::cli {

int cmd_convert(const std::vector<std::string>& args) {
  std::string in, out;
  bool dequantize = false;
  po::options_description d("convert options");
  d.add_options()("help,h", "show this help")("gguf", po::value(&in)->required(), "the GGUF file")(
      "out,o", po::value(&out)->required(), "the folder to write")(
      "dequantize", po::bool_switch(&dequantize),
      "every weight as float32 (default: Q8_0/Q4_0/Q4_1 matrices stay quantized as MatMulNBits)");
  po::positional_options_description pos;
  pos.add("gguf", 1);
  Parsed p;
  po::store(po::command_line_parser(args).options(d).positional(pos).run(), p.vm);
  if (p.vm.count("help")) {
    std::printf("usage: switchyard convert FILE.gguf --out DIR [--dequantize]\n");
    std::cout << d;
    return 0;
  }
  po::notify(p.vm);
  const nlohmann::json s = convert_gguf(in, out, dequantize);
  std::printf("%s (%s): %d matrices kept quantized, %d tensors as float32\n", in.c_str(), s["architecture"].get<std::string>().c_str(),
              s["kept_quantized"].get<int>(), s["dequantized"].get<int>());
  for (const auto& f : s["files"]) std::printf("wrote %s\n", f.get<std::string>().c_str());
  return 0;
}

}  // namespace sy::cli
