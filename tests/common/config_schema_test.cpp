// The field-table mechanism (common/config_schema.hpp) on a toy section: reading, unknown keys,
// type errors, limits, enums parsed once and written back as their names, the resolved table and
// the docs rows.
#include "smelt/common/config_schema.hpp"

#include <gtest/gtest.h>

namespace smelt {
namespace {

enum class Color { kRed, kGreen, kBlue };
constexpr EnumName<Color> kColorNames[] = {{Color::kRed, "red"}, {Color::kGreen, "green"}, {Color::kBlue, "blue"}};
std::span<const EnumName<Color>> enum_names(Color) { return kColorNames; }

struct Toy {
  int count = 3;
  double ratio = 0.5;
  bool on = true;
  std::string label = "x";
  Color color = Color::kGreen;
  std::vector<int> sizes = {1, 2};
  uint64_t seed = 7;
};

const Schema<Toy>& toy_schema() {
  static const Schema<Toy> s{"toy.sub",
                             {field("count", &Toy::count, "how many", in_range(1, 10)),
                              field("ratio", &Toy::ratio, "a fraction", {0, 1, true, false, "0 is off"}),
                              field("on", &Toy::on, "a switch"),
                              field("label", &Toy::label, "a name"),
                              field("color", &Toy::color, "a mode"),
                              field("sizes", &Toy::sizes, "lengths"),
                              field("seed", &Toy::seed, "rng seed")},
                             {"inner"}};
  return s;
}

std::string joined(const std::vector<std::string>& v) {
  std::string m;
  for (const auto& e : v) m += e + "\n";
  return m;
}

TEST(ConfigSchemaTest, ReadsKeysAndKeepsDefaults) {
  toml::table root = toml::parse("[toy.sub]\ncount = 5\ncolor = \"blue\"\nsizes = [4]\n[toy.sub.inner]\nx = 1\n");
  Toy t;
  std::vector<std::string> errors;
  schema_read(toy_schema(), root, t, errors);
  EXPECT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(t.count, 5);
  EXPECT_EQ(t.color, Color::kBlue);
  EXPECT_EQ(t.sizes, std::vector<int>{4});
  EXPECT_EQ(t.ratio, 0.5);
  EXPECT_EQ(t.label, "x");
}

TEST(ConfigSchemaTest, ErrorsNameSectionKeyValueAndWhatIsAllowed) {
  toml::table root = toml::parse("[toy.sub]\ncount = 11\nratio = 0\ncolor = \"pink\"\non = \"yes\"\ncolour = 1\n");
  Toy t;
  std::vector<std::string> errors;
  schema_read(toy_schema(), root, t, errors);
  const std::string m = joined(errors);
  EXPECT_NE(m.find("[toy.sub] count = 11: must be in [1, 10]"), std::string::npos) << m;
  EXPECT_NE(m.find("[toy.sub] ratio = 0: must be in (0, 1] (0 is off)"), std::string::npos) << m;
  EXPECT_NE(m.find("[toy.sub] color = \"pink\": expected \"red\", \"green\" or \"blue\""), std::string::npos) << m;
  EXPECT_NE(m.find("[toy.sub] on: expected true or false"), std::string::npos) << m;
  EXPECT_NE(m.find("[toy.sub] colour: unknown key"), std::string::npos) << m;
  EXPECT_EQ(errors.size(), 5u) << m;
  EXPECT_EQ(t.color, Color::kGreen);  // a bad name leaves the default
}

TEST(ConfigSchemaTest, NaNIsOutsideEveryLimit) {
  toml::table root = toml::parse("[toy.sub]\nratio = nan\n");
  Toy t;
  std::vector<std::string> errors;
  schema_read(toy_schema(), root, t, errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("ratio = nan"), std::string::npos) << errors[0];
}

TEST(ConfigSchemaTest, ResolvedTableWritesEnumsAsTheirNames) {
  Toy t;
  t.color = Color::kRed;
  toml::table r = schema_to_toml(toy_schema(), t);
  EXPECT_EQ(r["color"].value<std::string>(), "red");
  EXPECT_EQ(r["count"].value<int64_t>(), 3);
  EXPECT_EQ(r["seed"].value<int64_t>(), 7);
  EXPECT_EQ(r.size(), toy_schema().fields.size());
  // the same table ConfigSection::resolved() gives for plain keys
  ConfigSection sec(toml::table{}, "toy.sub");
  Toy d;
  sec.get("count", d.count);
  sec.get("sizes", d.sizes);
  EXPECT_EQ(config_to_string(toml::table{{"count", *r.get("count")}, {"sizes", *r.get("sizes")}}),
            config_to_string(sec.resolved()));
}

TEST(ConfigSchemaTest, DocsRowsCarryDefaultsAsTomlText) {
  auto docs = schema_docs(toy_schema());
  ASSERT_EQ(docs.size(), 7u);
  EXPECT_EQ(docs[0].name, "count");
  EXPECT_EQ(docs[0].default_text, "3");
  EXPECT_EQ(docs[0].allowed, "in [1, 10]");
  EXPECT_EQ(docs[1].default_text, "0.5");
  EXPECT_EQ(docs[2].default_text, "true");
  EXPECT_EQ(docs[3].default_text, "\"x\"");
  EXPECT_EQ(docs[4].default_text, "\"green\"");
  EXPECT_EQ(docs[4].type, "\"red\", \"green\" or \"blue\"");
  EXPECT_EQ(docs[5].default_text, "[ 1, 2 ]");
}

struct Outer {
  struct Inner {
    int depth = 2;
    Color color = Color::kBlue;
  } inner;
};

TEST(ConfigSchemaTest, FieldAtReachesNestedMembers) {
  const Schema<Outer> sc{"outer",
                         {field_at<Outer>("depth", [](auto& s) -> auto& { return s.inner.depth; }, "n", at_least(0)),
                          field_at<Outer>("color", [](auto& s) -> auto& { return s.inner.color; }, "c")}};
  toml::table root = toml::parse("[outer]\ndepth = 5\ncolor = \"red\"\n");
  Outer o;
  std::vector<std::string> errors;
  schema_read(sc, root, o, errors);
  EXPECT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(o.inner.depth, 5);
  EXPECT_EQ(o.inner.color, Color::kRed);
  EXPECT_EQ(schema_to_toml(sc, o)["color"].value<std::string>(), "red");
  root = toml::parse("[outer]\ndepth = -1\n");
  schema_read(sc, root, o, errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "[outer] depth = -1: must be >= 0");
}

TEST(EnumNamesTest, ParseAndNameRoundTrip) {
  Color c = Color::kRed;
  EXPECT_TRUE(enum_parse("blue", c));
  EXPECT_EQ(c, Color::kBlue);
  EXPECT_FALSE(enum_parse("Blue", c));
  EXPECT_EQ(c, Color::kBlue);
  EXPECT_STREQ(enum_name(Color::kGreen), "green");
  EXPECT_EQ(enum_allowed<Color>(), "\"red\", \"green\" or \"blue\"");
}

}  // namespace
}  // namespace smelt
