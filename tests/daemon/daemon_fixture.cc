#include "tests/daemon/daemon_fixture.h"

#include <cstdio>
#include <sstream>

namespace hutch::testing {

void DaemonTest::SetUp() {
  HUTCH_REQUIRE_ROOT();
  ASSERT_FALSE(temp_.path().empty());
  daemon_ = std::make_unique<Hutchd>(temp_.path(), std::vector<std::string>{"--destroy-on-exit"});
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
}

void DaemonTest::TearDown() {
  if (!daemon_) return;
  if (daemon_->pid() > 0) {
    auto list = daemon_->get("/v1/sandboxes");
    if (list.status == 200) {
      for (const json& sandbox : list.body["sandboxes"])
        EXPECT_EQ(daemon_->del("/v1/sandboxes/" + sandbox["id"].get<std::string>()).status, 204);
    }
    EXPECT_EQ(daemon_->stop(SIGTERM), 0) << daemon_->log();
  }
  if (HasFailure()) std::fprintf(stderr, "--- hutchd log ---\n%s\n", daemon_->log().c_str());
  daemon_.reset();
}

std::string DaemonTest::create(const json& body) {
  auto reply = daemon_->post("/v1/sandboxes", body);
  EXPECT_EQ(reply.status, 201) << reply.raw;
  if (reply.status != 201) return "";
  return reply.body["id"].get<std::string>();
}

json DaemonTest::exec(const std::string& id, const json& body) {
  auto reply = daemon_->post("/v1/sandboxes/" + id + "/exec", body);
  EXPECT_EQ(reply.status, 200) << reply.raw;
  return reply.body;
}

std::string error_code(const Hutchd::Reply& reply) {
  if (!reply.body.is_object() || !reply.body.contains("error")) return "";
  return reply.body["error"].value("code", "");
}

FollowedOutput parse_followed(const std::string& raw) {
  FollowedOutput followed;
  std::istringstream lines(raw);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    followed.last = json::parse(line);
    if (followed.last.contains("data")) followed.data += followed.last["data"].get<std::string>();
  }
  return followed;
}

}  // namespace hutch::testing
