// [prep] configuration: TOML sections into PrepConfig, validation, and the resolved table.
#include <fmt/format.h>

#include "smelt/common/config.hpp"
#include "smelt/refine/prep.hpp"

namespace smelt {

namespace {

// Reads all sections and, when resolved is given, records their final values there.
std::vector<std::string> read_all(const toml::table& root, PrepConfig& c, toml::table* resolved) {
  std::vector<std::string> errs;
  auto done = [&](ConfigSection& s) {
    auto e = s.finish();
    errs.insert(errs.end(), e.begin(), e.end());
    if (resolved) config_insert(*resolved, s.name(), s.resolved());
  };
  ConfigSection p(root, "prep");
  p.get("threads", c.threads);
  p.get("task", c.task);
  p.get("tasks", c.tasks);
  p.get("seed", c.seed);
  p.get("only_extract", c.only_extract);
  p.get("keep_rejected", c.keep_rejected);
  p.get("shard_mb", c.shard_mb);
  p.get("zstd_level", c.zstd_level);
  p.get("log_interval_s", c.log_interval_s);
  for (const char* sub : {"read", "extract", "quality", "sample", "dedup"}) p.known(sub);
  done(p);

  ConfigSection r(root, "prep.read");
  r.get("text_field", c.read.text_field);
  r.get("id_field", c.read.id_field);
  r.get("url_field", c.read.url_field);
  uint64_t max_mb = c.read.max_record_bytes >> 20;
  r.get("max_record_mb", max_mb);
  c.read.max_record_bytes = max_mb << 20;
  r.get("text_unit", c.read.text_unit);
  done(r);

  ConfigSection e(root, "prep.extract");
  e.get("enabled", c.extract_enabled);
  e.get("remove_boilerplate", c.extract.remove_boilerplate);
  e.get("keep_headings", c.extract.keep_headings);
  e.get("keep_title", c.extract.keep_title);
  e.get("strip_terminal_codes", c.strip_terminal_codes);
  done(e);

  ConfigSection q(root, "prep.quality");
  q.get("enabled", c.quality_enabled);
  quality_config_read(q, c.quality);
  done(q);

  ConfigSection s(root, "prep.sample");
  s.get("enabled", c.sample_enabled);
  s.get("threshold", c.sample_threshold);
  done(s);

  ConfigSection d(root, "prep.dedup");
  d.get("enabled", c.dedup_enabled);
  dedup_config_read(d, c.dedup);
  done(d);
  return errs;
}

std::string join_lines(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : "\n") + s;
  return out;
}

}  // namespace

Status prep_config_read(const toml::table& root, PrepConfig& c) {
  auto errs = read_all(root, c, nullptr);
  if (!errs.empty()) return Status::error(join_lines(errs));
  return Status::ok();
}

toml::table prep_config_to_toml(const PrepConfig& c) {
  // Reading an empty table leaves every field at c's value and records it: the resolved config.
  toml::table resolved;
  PrepConfig probe = c;
  read_all(toml::table{}, probe, &resolved);
  return resolved;
}

Status prep_config_validate(const PrepConfig& c) {
  std::vector<std::string> errs;
  if (c.inputs.empty()) errs.push_back("no input: give --input PATH (files, folders or globs)");
  if (c.output.empty()) errs.push_back("no output folder: give --output DIR");
  if (c.threads < 0) errs.push_back("[prep] threads: expected 0 (all cores) or more");
  if (c.tasks < 1) errs.push_back("[prep] tasks: expected 1 or more");
  if (c.task < 0 || c.task >= c.tasks)
    errs.push_back(fmt::format("[prep] task {}: expected 0 <= task < tasks ({})", c.task, c.tasks));
  if (c.shard_mb < 1) errs.push_back("[prep] shard_mb: expected at least 1");
  if (c.zstd_level < 1 || c.zstd_level > 19) errs.push_back("[prep] zstd_level: expected 1..19");
  if (c.sample_threshold < 0 || c.sample_threshold > 1)
    errs.push_back("[prep.sample] threshold: expected a number in [0,1]");
  if (c.sample_enabled && !c.quality_enabled && !c.only_extract)
    errs.push_back("[prep.sample] enabled needs [prep.quality] enabled (sampling draws on the score)");
  if (c.read.text_unit != "file" && c.read.text_unit != "paragraph" && c.read.text_unit != "line")
    errs.push_back("[prep.read] text_unit: expected \"file\", \"paragraph\" or \"line\"");
  if (c.read.max_record_bytes == 0) errs.push_back("[prep.read] max_record_mb: expected at least 1");
  for (const auto& e : dedup_config_validate(c.dedup)) errs.push_back("[prep.dedup] " + e);
  for (const auto& e : quality_config_check(c.quality)) errs.push_back(e);
  if (!errs.empty()) return Status::error(join_lines(errs));
  return Status::ok();
}

}  // namespace smelt
