#include "common/units.h"

#include <gtest/gtest.h>

#include "gradsync/error.h"

namespace gradsync {

TEST(Units, Bytes) {
  EXPECT_EQ(parseBytes("4096", "x"), 4096u);
  EXPECT_EQ(parseBytes("64K", "x"), 65536u);
  EXPECT_EQ(parseBytes("1M", "x"), 1u << 20);
  EXPECT_EQ(parseBytes("16MiB", "x"), 16u << 20);
  EXPECT_EQ(parseBytes("2GB", "x"), 2ull << 30);
  EXPECT_THROW(parseBytes("12Q", "--max-bytes"), ConfigError);
  EXPECT_THROW(parseBytes("abc", "--max-bytes"), ConfigError);
}

TEST(Units, Bandwidth) {
  EXPECT_DOUBLE_EQ(parseBandwidth("1gbit", "x"), 125e6);
  EXPECT_DOUBLE_EQ(parseBandwidth("100mbit", "x"), 12.5e6);
  EXPECT_DOUBLE_EQ(parseBandwidth("10Gbps", "x"), 1.25e9);
  EXPECT_DOUBLE_EQ(parseBandwidth("125MB/s", "x"), 125e6);
  EXPECT_THROW(parseBandwidth("1gbyte", "--bandwidth"), ConfigError);
}

TEST(Units, Duration) {
  EXPECT_DOUBLE_EQ(parseDurationSeconds("100us", "x"), 100e-6);
  EXPECT_DOUBLE_EQ(parseDurationSeconds("5ms", "x"), 5e-3);
  EXPECT_DOUBLE_EQ(parseDurationSeconds("2", "x"), 2.0);
  EXPECT_DOUBLE_EQ(parseDurationSeconds("5min", "x"), 300.0);
  EXPECT_DOUBLE_EQ(parseDurationSeconds("8h", "x"), 8 * 3600.0);
  EXPECT_THROW(parseDurationSeconds("2d", "--timeout"), ConfigError);
}

TEST(Units, ErrorNamesFlagAndForms) {
  try {
    parseBandwidth("fast", "--bandwidth");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--bandwidth"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("1gbit"), std::string::npos);
  }
}

TEST(Units, FormatBytes) {
  EXPECT_EQ(formatBytes(512), "512");
  EXPECT_EQ(formatBytes(1536), "1.5K");
  EXPECT_EQ(formatBytes(64u << 20), "64M");
}

TEST(Units, SplitOptions) {
  EXPECT_TRUE(splitOptions("").empty());
  const std::vector<OptionItem> items = splitOptions("layers=2,on,,x=,a=b=c");
  ASSERT_EQ(items.size(), 5u);
  EXPECT_EQ(items[0].key, "layers");
  EXPECT_EQ(items[0].value, "2");
  EXPECT_TRUE(items[0].hasValue);
  EXPECT_EQ(items[1].key, "on");  // a bare key
  EXPECT_FALSE(items[1].hasValue);
  EXPECT_EQ(items[2].text, "");  // kept, for the caller to refuse
  EXPECT_TRUE(items[3].hasValue);
  EXPECT_EQ(items[3].value, "");
  EXPECT_EQ(items[4].key, "a");  // the first '=' splits
  EXPECT_EQ(items[4].value, "b=c");
  EXPECT_EQ(splitOptions("a,").size(), 2u);  // a trailing comma leaves an empty item
}

}  // namespace gradsync
