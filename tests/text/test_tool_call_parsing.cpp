// Tool calls read from a growing output (streaming): the call being written
// is reported once its name is known, with its arguments so far, and the
// pieces a stream sends add up to the whole call's arguments, which keep
// the text the model wrote. Every family, in each of its spellings.
#include <gtest/gtest.h>

#include <string>

#include "text/tool_calls.h"

namespace {

struct Case {
  const char* family;
  std::string before, call, after;  // the call's arguments are {"city": "Paris", "days": [1, 2]}
};

const std::string kArgs = R"({"city": "Paris", "days": [1, 2]})";

TEST(ToolCallParsing, PartialCallsGrowIntoTheWholeCall) {
  const Case cases[] = {
      {"hermes", "Sure. ", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + kArgs + "}\n</tool_call>", ""},
      {"granite", "", "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": " + kArgs + "}]", ""},
      {"mistral", "", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + kArgs + "}]", ""},
      {"llama3_json", "", "{\"name\": \"get_weather\", \"parameters\": " + kArgs + "}", ""},
      {"mistral", "", "[TOOL_CALLS]get_weather[ARGS]" + kArgs, ""},  // v11
      {"deepseek_v3", "", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" + kArgs + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", ""},
      {"deepseek_v3", "",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" + kArgs + "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", ""},
      {"gpt_oss", "", "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + kArgs + "<|call|>", ""},
  };
  for (const Case& c : cases) {
    const sy::ToolCallFamily& f = sy::tool_call_family_named(c.family);
    const std::string text = c.before + c.call + c.after;
    std::string streamed;
    bool named = false;
    for (size_t n = 1; n < text.size(); ++n) {
      const sy::ParsedOutput p = sy::parse_model_output(f, text.substr(0, n), false);
      const std::string args = p.has_partial ? p.partial.arguments : p.calls.empty() ? "" : p.calls[0].arguments;
      if (p.has_partial || !p.calls.empty()) {
        EXPECT_EQ(p.has_partial ? p.partial.name : p.calls[0].name, "get_weather") << c.family << " at " << n;
        named = true;
      }
      // Each step's arguments extend the last's: a stream can send the difference.
      ASSERT_EQ(args.compare(0, streamed.size(), streamed), 0) << c.family << " at " << n << ": '" << args << "' after '" << streamed << "'";
      if (args.size() > streamed.size()) streamed = args;
    }
    const sy::ParsedOutput whole = sy::parse_model_output(f, text, true);
    ASSERT_EQ(whole.calls.size(), 1u) << c.family;
    // The stream's last step reads the whole output.
    ASSERT_EQ(whole.calls[0].arguments.compare(0, streamed.size(), streamed), 0) << c.family;
    streamed = whole.calls[0].arguments;
    EXPECT_TRUE(named) << c.family;
    EXPECT_EQ(whole.calls[0].arguments, kArgs) << c.family;  // as written
    EXPECT_GT(streamed.size(), 0u) << c.family;
    EXPECT_FALSE(whole.has_partial);
  }
}

TEST(ToolCallParsing, TextThatOnlyLooksLikeACallIsNotReportedAsOne) {
  const sy::ToolCallFamily& hermes = sy::tool_call_family_named("hermes");
  // No name yet: nothing to announce.
  EXPECT_FALSE(sy::parse_model_output(hermes, "<tool_call>\n{\"argu", false).has_partial);
  EXPECT_FALSE(sy::parse_model_output(hermes, "<tool_call>\n{\"name\": \"get_wea", false).has_partial);
  // A name that is not a string.
  EXPECT_FALSE(sy::parse_model_output(hermes, "<tool_call>\n{\"name\": 3, ", false).has_partial);
  // Arguments written as a string (some models do): the name, no arguments until the call closes.
  const sy::ParsedOutput p = sy::parse_model_output(hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a", false);
  ASSERT_TRUE(p.has_partial);
  EXPECT_EQ(p.partial.arguments, "");
}

}  // namespace
