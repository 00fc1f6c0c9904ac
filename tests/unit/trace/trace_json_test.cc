#include "trace/trace_json.h"

#include "gradsync/trace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace gradsync {
namespace {

std::string jsonQuoted(std::string_view text) {
  std::string out;
  appendJsonString(out, text);
  return out;
}

std::string micros(int64_t nanos) {
  std::string out;
  appendMicros(out, nanos);
  return out;
}

TEST(TraceJson, EscapesControlCharactersAndQuotes) {
  EXPECT_EQ(jsonQuoted("plain.name"), "\"plain.name\"");
  EXPECT_EQ(jsonQuoted("a\"b\\c\nd\te\x01"), "\"a\\\"b\\\\c\\nd\\te\\u0001\"");
  std::string tricky = "layer \"1\"\n\x1f end";
  EXPECT_EQ(nlohmann::json::parse(jsonQuoted(tricky)).get<std::string>(), tricky);
}

TEST(TraceJson, KeepsValidUtf8AndReplacesInvalidBytes) {
  std::string valid = "gewicht.\xC3\xA4\xE2\x82\xAC\xF0\x9F\x98\x80";  // ä € 😀
  EXPECT_EQ(jsonQuoted(valid), "\"" + valid + "\"");
  // A lone continuation byte, a truncated sequence, an overlong form and a surrogate.
  for (std::string bad : {"a\x80z", "a\xE2\x82", "a\xC0\xAFz", "a\xED\xA0\x80z"}) {
    std::string out = jsonQuoted(bad);
    EXPECT_NO_THROW(nlohmann::json::parse(out)) << out;
    EXPECT_NE(out.find("\xEF\xBF\xBD"), std::string::npos) << out;
  }
}

TEST(TraceJson, MicrosecondsAreExactWithThreeDecimals) {
  EXPECT_EQ(micros(0), "0.000");
  EXPECT_EQ(micros(999), "0.999");
  EXPECT_EQ(micros(1'234'567), "1234.567");
  EXPECT_EQ(micros(-1'500), "-1.500");
  EXPECT_EQ(micros(1'700'000'000'123'456'789), "1700000000123456.789");
  EXPECT_NO_THROW(nlohmann::json::parse(micros(std::numeric_limits<int64_t>::min())));
}

TEST(TraceJson, ArgsOfEveryType) {
  TraceArgs args;
  args.add("tensor", "fc.weight")
      .add("bytes", uint64_t{1} << 40)
      .add("priority", -3)
      .add("ratio", 0.25)
      .add("nan", std::nan(""))
      .add("sparse", true)
      .add("owner", std::string("rank 1"));
  auto json = nlohmann::json::parse("{" + args.members() + "}");
  EXPECT_EQ(json["tensor"], "fc.weight");
  EXPECT_EQ(json["bytes"], uint64_t{1} << 40);
  EXPECT_EQ(json["priority"], -3);
  EXPECT_EQ(json["ratio"], 0.25);
  EXPECT_TRUE(json["nan"].is_null());
  EXPECT_EQ(json["sparse"], true);
  EXPECT_EQ(json["owner"], "rank 1");
  EXPECT_TRUE(TraceArgs().empty());
}

}  // namespace
}  // namespace gradsync
