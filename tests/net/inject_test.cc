// Credential injection's pure parts: which rules apply, placeholders and their scanner, head
// rewriting (values never in errors), and the JSON codec.
#include "net/inject.h"

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <random>

#include "net/http_head.h"
#include "net/inject_json.h"

namespace hutch::net {
namespace {

Rule host(std::string_view text) {
  auto rule = parse_rule(text);
  EXPECT_TRUE(rule) << text;
  return *rule;
}

InjectRule openai_rule() {
  return {.match_hosts = {host("api.openai.com")},
          .method = std::nullopt,
          .path_prefix = "/v1/",
          .headers = {{"Authorization", "OPENAI_API_KEY", "Bearer "}}};
}

std::span<const uint8_t> bytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

TEST(Inject, SecretNames) {
  for (const char* ok : {"OPENAI_API_KEY", "_x", "a1", "A"}) EXPECT_TRUE(is_valid_secret_name(ok));
  for (const char* bad : {"", "1KEY", "KEY-1", "KEY.X", "KEY X", "KÉY"}) {
    EXPECT_FALSE(is_valid_secret_name(bad)) << bad;
  }
  EXPECT_TRUE(is_valid_secret_name(std::string(128, 'K')));
  EXPECT_FALSE(is_valid_secret_name(std::string(129, 'K')));
}

TEST(Inject, RulesForHostMethodAndPath) {
  std::vector<InjectRule> rules = {
      openai_rule(),
      {.match_hosts = {host("*.github.com")},
       .method = "GET",
       .path_prefix = std::nullopt,
       .headers = {{"X-Token", "GH", ""}}},
  };
  ASSERT_TRUE(validate_rule(rules[0]));
  ASSERT_TRUE(validate_rule(rules[1]));
  EXPECT_EQ(rules_for(rules, "api.openai.com", "POST", "/v1/chat/completions").size(), 1u);
  EXPECT_EQ(rules_for(rules, "api.openai.com", "POST", "/v1/x?y=/../").size(), 1u);
  EXPECT_TRUE(rules_for(rules, "api.openai.com", "POST", "/v2/chat").empty());
  EXPECT_TRUE(rules_for(rules, "openai.com", "POST", "/v1/chat").empty());
  EXPECT_TRUE(rules_for(rules, "x.api.openai.com", "POST", "/v1/chat").empty());
  EXPECT_EQ(rules_for(rules, "api.github.com", "GET", "/anything").size(), 1u);
  EXPECT_TRUE(rules_for(rules, "api.github.com", "POST", "/anything").empty());
  EXPECT_TRUE(rules_for(rules, "api.github.com", "get", "/anything").empty());
  EXPECT_TRUE(rules_for(rules, "github.com", "GET", "/").empty());  // *.x is not the apex
  EXPECT_TRUE(terminates(rules, "api.openai.com"));
  EXPECT_TRUE(terminates(rules, "a.b.github.com"));
  EXPECT_FALSE(terminates(rules, "github.com"));
  EXPECT_FALSE(terminates(rules, "example.com"));
}

TEST(Inject, AmbiguousPathsGetNoCredential) {
  const std::vector<InjectRule> rules = {openai_rule()};
  for (const char* target :
       {"/v1/../admin", "/v1/./x", "/v1/..", "/v1/%2e%2e/admin", "/v1/%2E%2E/admin", "/v1/a%2fb",
        "/v1/a%2Fb", "/v1\\..\\admin", "/v1/a%5cb", "http://api.openai.com/v1/x",
        "api.openai.com:443", "*", ""}) {
    EXPECT_TRUE(rules_for(rules, "api.openai.com", "POST", target).empty()) << target;
  }
  // Dots that are not whole segments are fine.
  EXPECT_EQ(rules_for(rules, "api.openai.com", "GET", "/v1/files/a..b/.x").size(), 1u);
}

TEST(Inject, ValidateRefusesBadRules) {
  auto with = [](auto change) {
    InjectRule rule = openai_rule();
    change(rule);
    return validate_rule(rule);
  };
  EXPECT_FALSE(with([](InjectRule& r) { r.match_hosts.clear(); }));
  EXPECT_FALSE(with([](InjectRule& r) { r.match_hosts = {host("10.0.0.0/8")}; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.match_hosts = {host("api.openai.com:443")}; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.method = "post"; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.method = "PO ST"; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.path_prefix = "v1/"; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.path_prefix = "/v1/\r\n"; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.headers.clear(); }));
  EXPECT_FALSE(with([](InjectRule& r) { r.headers[0].name = "Bad Header"; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.headers[0].name = "X:Y"; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.headers[0].name = "host"; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.headers[0].name = "Content-Length"; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.headers[0].name = "Transfer-Encoding"; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.headers[0].secret = "1BAD"; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.headers[0].prefix = "Bearer\r\nX: y"; }));
  EXPECT_FALSE(with([](InjectRule& r) { r.headers.push_back({"authorization", "OTHER", ""}); }));
}

TEST(Inject, HeadersToSetWithSecretValues) {
  InjectRule first = openai_rule();
  InjectRule second = {
      .match_hosts = {host("api.openai.com")},
      .method = std::nullopt,
      .path_prefix = std::nullopt,
      .headers = {{"AUTHORIZATION", "OTHER_KEY", "Token "}, {"OpenAI-Organization", "ORG", ""}}};
  const std::map<std::string, std::string, std::less<>> secrets = {
      {"OPENAI_API_KEY", "sk-real"}, {"OTHER_KEY", "k2"}, {"ORG", "org-1"}};
  const SecretLookup lookup = [&](std::string_view name) -> std::optional<std::string> {
    auto found = secrets.find(name);
    return found == secrets.end() ? std::nullopt : std::optional(found->second);
  };
  const std::vector<const InjectRule*> both = {&first, &second};
  auto set = headers_to_set(both, lookup);
  ASSERT_TRUE(set);
  ASSERT_EQ(set->size(), 2u);
  EXPECT_EQ((*set)[0].name, "Authorization");
  EXPECT_EQ((*set)[0].value, "Token k2");  // the later rule wins
  EXPECT_EQ((*set)[1].value, "org-1");
  const std::vector<const InjectRule*> only_first = {&first};
  auto missing = headers_to_set(only_first, [](std::string_view) { return std::nullopt; });
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, ErrorKind::kNotFound);
  EXPECT_NE(missing.error().detail.find("OPENAI_API_KEY"), std::string::npos);
}

TEST(Inject, PlaceholdersAreDeterministicPerSandboxAndSecret) {
  auto key = new_placeholder_key();
  auto other_key = new_placeholder_key();
  ASSERT_TRUE(key && other_key);
  EXPECT_NE(*key, *other_key);
  const std::string a = placeholder_for(*key, "OPENAI_API_KEY");
  EXPECT_EQ(a, placeholder_for(*key, "OPENAI_API_KEY"));
  EXPECT_NE(a, placeholder_for(*key, "OPENAI_API_KEY2"));
  EXPECT_NE(a, placeholder_for(*other_key, "OPENAI_API_KEY"));
  EXPECT_TRUE(a.starts_with("hutch-placeholder-OPENAI_API_KEY-"));
  const std::string digits = a.substr(std::string("hutch-placeholder-OPENAI_API_KEY-").size());
  EXPECT_EQ(digits.size(), 32u);
  EXPECT_EQ(digits.find_first_not_of("0123456789abcdef"), std::string::npos);
  // A fixed key gives a fixed placeholder (HMAC-SHA256 of the name, not of any value).
  PlaceholderKey zero{};
  EXPECT_EQ(placeholder_for(zero, "K"), placeholder_for(zero, "K"));
  EXPECT_NE(placeholder_for(zero, "K"), placeholder_for(*key, "K"));
}

TEST(Inject, ScannerFindsEveryKnownPlaceholder) {
  auto key = new_placeholder_key();
  ASSERT_TRUE(key);
  PlaceholderScanner scanner;
  const std::string openai = placeholder_for(*key, "OPENAI_API_KEY");
  const std::string github = placeholder_for(*key, "GH");
  scanner.add("OPENAI_API_KEY", openai);
  scanner.add("GH", github);
  const std::string head = "GET /?token=" + github +
                           " HTTP/1.1\r\nHost: evil.com\r\nX-Key: " + openai +
                           "\r\nCookie: a=" + openai + "\r\n\r\n";
  const auto hits = scanner.scan(bytes(head));
  ASSERT_EQ(hits.size(), 3u);
  EXPECT_EQ(hits[0].secret, "GH");
  EXPECT_EQ(hits[0].offset, head.find(github));
  EXPECT_EQ(hits[1].secret, "OPENAI_API_KEY");
  EXPECT_EQ(hits[2].secret, "OPENAI_API_KEY");
  // Unknown or cut-off placeholders are not hits; the scanner needs the whole head at once.
  EXPECT_TRUE(scanner.scan("X: " + openai.substr(0, openai.size() - 1) + "\r\n").empty());
  EXPECT_TRUE(scanner.scan(placeholder_for(PlaceholderKey{}, "OPENAI_API_KEY")).empty());
  EXPECT_TRUE(scanner.scan("hutch-placeholder-hutch-placeholder-").empty());
  EXPECT_EQ(scanner.scan("hutch-placeholder-" + openai).size(), 1u);
  // A huge head with the placeholder at its very end.
  std::string huge(kMaxHttpHead - openai.size(), 'h');
  huge += openai;
  const auto end_hits = scanner.scan(huge);
  ASSERT_EQ(end_hits.size(), 1u);
  EXPECT_EQ(end_hits[0].offset, kMaxHttpHead - openai.size());
}

// A body seen a read at a time: a placeholder is found wherever the reads cut it, and only one
// of the rules' secrets counts.
TEST(Inject, StreamFindsAPlaceholderSplitAcrossPieces) {
  auto key = new_placeholder_key();
  ASSERT_TRUE(key);
  const std::vector<InjectRule> rules = {openai_rule()};
  const std::string placeholder = placeholder_for(*key, "OPENAI_API_KEY");
  const std::string body = std::string(5000, 'a') + "{\"api_key\":\"" + placeholder + "\"}";
  const size_t end = body.find(placeholder) + placeholder.size();
  for (size_t cut = 4990; cut < body.size(); ++cut) {
    for (size_t piece_size : {size_t{1}, size_t{7}, size_t{4096}}) {
      PlaceholderStream stream;
      std::optional<std::string> found =
          stream.feed(rules, *key, bytes(std::string_view(body).substr(0, cut)));
      if (cut >= end) {
        EXPECT_EQ(found, "OPENAI_API_KEY") << "whole in the first piece, cut " << cut;
        continue;
      }
      EXPECT_FALSE(found) << "found before it was whole, cut " << cut;
      for (size_t at = cut; at < body.size() && !found; at += piece_size)
        found = stream.feed(rules, *key, bytes(std::string_view(body).substr(at, piece_size)));
      ASSERT_TRUE(found) << "cut " << cut << ", pieces of " << piece_size;
      EXPECT_EQ(*found, "OPENAI_API_KEY");
    }
  }
  // Another secret's placeholder, another sandbox's, a cut-off one, or no rules: nothing.
  PlaceholderStream stream;
  EXPECT_FALSE(stream.feed(rules, *key, bytes(placeholder_for(*key, "OTHER"))));
  EXPECT_FALSE(
      stream.feed(rules, *key, bytes(placeholder_for(PlaceholderKey{}, "OPENAI_API_KEY"))));
  EXPECT_FALSE(stream.feed(rules, *key, bytes(placeholder.substr(0, placeholder.size() - 1))));
  EXPECT_FALSE(stream.feed(rules, *key, bytes("x")));
  EXPECT_FALSE(PlaceholderStream().feed({}, *key, bytes(placeholder)));
}

TEST(Inject, RewriteReplacesEveryFieldOfTheName) {
  const std::string head =
      "POST /v1/chat HTTP/1.1\r\nHost: api.openai.com\r\nauthorization: Bearer old\r\n"
      "Accept: */*\r\nAUTHORIZATION: Bearer again\r\n\r\n";
  const std::vector<HeaderValue> set = {{"Authorization", "Bearer sk-real"},
                                        {"OpenAI-Organization", "org-1"}};
  auto rewritten = rewrite_head(head, set);
  ASSERT_TRUE(rewritten) << rewritten.error().message();
  EXPECT_EQ(*rewritten,
            "POST /v1/chat HTTP/1.1\r\nHost: api.openai.com\r\nAccept: */*\r\n"
            "Authorization: Bearer sk-real\r\nOpenAI-Organization: org-1\r\n\r\n");
  // What the relay parsed, it can still parse.
  const HttpHead parsed = parse_http_head(bytes(*rewritten));
  EXPECT_EQ(parsed.status, HeadStatus::kComplete);
  EXPECT_EQ(parsed.host, "api.openai.com");
  // Nothing to set: the head as it was.
  EXPECT_EQ(*rewrite_head(head, {}), head);
}

TEST(Inject, RewriteErrorsNeverShowTheValue) {
  const std::string head = "GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n";
  for (const char* value :
       {"sk-secret\r\nX-Evil: 1", "sk-secret\n", "sk-secret\r", "sk-\x01secret"}) {
    const std::vector<HeaderValue> set = {{"Authorization", value}};
    auto rewritten = rewrite_head(head, set);
    ASSERT_FALSE(rewritten);
    EXPECT_EQ(rewritten.error().message().find("secret"), std::string::npos)
        << rewritten.error().message();
    EXPECT_NE(rewritten.error().message().find("Authorization"), std::string::npos);
  }
  const std::vector<HeaderValue> nul = {{"Authorization", std::string("sk\0x", 4)}};
  EXPECT_FALSE(rewrite_head(head, nul));
  const std::vector<HeaderValue> bad_name = {{"Bad Name", "v"}};
  EXPECT_FALSE(rewrite_head(head, bad_name));
}

TEST(Inject, RewriteRefusesHugeAndBrokenHeads) {
  const std::vector<HeaderValue> set = {{"Authorization", "Bearer sk-real"}};
  // Incomplete, bare LF, header without colon.
  EXPECT_FALSE(rewrite_head("GET / HTTP/1.1\r\nHost: a\r\n", set));
  EXPECT_FALSE(rewrite_head("GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n", set));
  EXPECT_FALSE(rewrite_head("GET / HTTP/1.1\r\nHost a\r\n\r\n", set));
  EXPECT_FALSE(rewrite_head("GET / HTTP/1.1\r\nHost: a\r\nAuthorization : x\r\n\r\n", set));
  EXPECT_FALSE(rewrite_head("GET / HTTP/1.1\r\nHost: a\r\n Authorization: x\r\n\r\n", set));
  // Over kMaxHttpHead as given, and pushed over it by the added field.
  const std::string start = "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: ";
  const std::string end = "\r\n\r\n";
  std::string over = start + std::string(kMaxHttpHead, 'p') + end;
  EXPECT_FALSE(rewrite_head(over, set));
  std::string full = start + std::string(kMaxHttpHead - start.size() - end.size(), 'p') + end;
  ASSERT_EQ(full.size(), kMaxHttpHead);
  ASSERT_TRUE(rewrite_head(full, {}));
  auto grown = rewrite_head(full, set);
  ASSERT_FALSE(grown);
  EXPECT_EQ(grown.error().message().find("sk-real"), std::string::npos);
  // Many fields of the replaced name, all removed.
  std::string many = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 2000; ++i) many += "Authorization: x\r\n";
  many += "\r\n";
  auto cleaned = rewrite_head(many, set);
  ASSERT_TRUE(cleaned);
  EXPECT_EQ(*cleaned, "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer sk-real\r\n\r\n");
}

// Random heads built from the characters that matter: a rewrite either fails or yields a head
// that ends the head once, carries the set field exactly once and no other field of its name.
TEST(Inject, RewriteOfRandomHeads) {
  std::mt19937 random(12);
  const std::string alphabet = "ab:\r\n \tAuthorization";
  const std::vector<HeaderValue> set = {{"Authorization", "Bearer sk-real"}};
  for (int round = 0; round < 20000; ++round) {
    std::string head = "GET / HTTP/1.1\r\n";
    const size_t size = random() % 64;
    for (size_t i = 0; i < size; ++i) head += alphabet[random() % alphabet.size()];
    head += "\r\n\r\n";
    auto rewritten = rewrite_head(head, set);
    if (!rewritten) continue;
    EXPECT_TRUE(rewritten->ends_with("\r\nAuthorization: Bearer sk-real\r\n\r\n")) << head;
    EXPECT_EQ(rewritten->find("\r\n\r\n"), rewritten->size() - 4) << head;
    size_t fields = 0;
    for (size_t at = rewritten->find("\r\nauthorization:"); at != std::string::npos;
         at = rewritten->find("\r\nauthorization:", at + 1)) {
      ++fields;
    }
    std::string lower = *rewritten;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    size_t any_case = 0;
    for (size_t at = lower.find("\r\nauthorization:"); at != std::string::npos;
         at = lower.find("\r\nauthorization:", at + 1)) {
      ++any_case;
    }
    EXPECT_EQ(fields, 0u) << head;
    EXPECT_EQ(any_case, 1u) << head;
  }
}

TEST(InjectJson, ParsesAndRoundTrips) {
  auto rules = parse_inject_json(R"([
    {"match_hosts": ["api.openai.com", "*.OpenAI.com"], "method": "POST", "path_prefix": "/v1/",
     "headers": {"Authorization": {"secret": "OPENAI_API_KEY", "prefix": "Bearer "},
                 "OpenAI-Organization": "OPENAI_ORG"}},
    {"match_hosts": ["api.anthropic.com"], "headers": {"x-api-key": "ANTHROPIC_API_KEY"}}])");
  ASSERT_TRUE(rules) << rules.error().message();
  ASSERT_EQ(rules->size(), 2u);
  const InjectRule& first = (*rules)[0];
  EXPECT_EQ(first.match_hosts[1].to_string(), "*.openai.com");
  EXPECT_EQ(first.method, "POST");
  EXPECT_EQ(first.path_prefix, "/v1/");
  ASSERT_EQ(first.headers.size(), 2u);
  EXPECT_EQ(first.headers[0], (InjectHeader{"Authorization", "OPENAI_API_KEY", "Bearer "}));
  EXPECT_EQ(first.headers[1], (InjectHeader{"OpenAI-Organization", "OPENAI_ORG", ""}));
  EXPECT_FALSE((*rules)[1].method);
  auto back = parse_inject_json(inject_to_json(*rules));
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(*back, *rules);
  EXPECT_EQ(*parse_inject_json("[]"), std::vector<InjectRule>{});
}

TEST(InjectJson, ErrorsNameTheEntry) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{}", "not a JSON array"},
      {"[1", "not JSON"},
      {"[1]", "inject[0] is not an object"},
      {R"([{"match_hosts":["a.com"],"headers":{"X":"K"},"methd":"GET"}])",
       "inject[0]: unknown key \"methd\""},
      {R"([{"headers":{"X":"K"}}])", "inject[0]: \"match_hosts\" is empty"},
      {R"([{"match_hosts":["a.com"]}])", "inject[0]: \"headers\" is empty"},
      {R"([{"match_hosts":"a.com","headers":{"X":"K"}}])", "inject[0].match_hosts is not an array"},
      {R"([{"match_hosts":[7],"headers":{"X":"K"}}])", "inject[0].match_hosts[0] is not a string"},
      {R"([{"match_hosts":["a..com"],"headers":{"X":"K"}}])",
       "inject[0].match_hosts[0] \"a..com\""},
      {R"([{"match_hosts":["a.com"],"headers":{"X":"K"}},{"match_hosts":["10.0.0.0/8"],"headers":{"X":"K"}}])",
       "inject[1]: match_hosts \"10.0.0.0/8\""},
      {R"([{"match_hosts":["a.com"],"headers":{"X":{"secret":"K","prefx":"B"}}}])",
       "inject[0].headers \"X\": unknown key \"prefx\""},
      {R"([{"match_hosts":["a.com"],"headers":{"X":{"prefix":"B"}}}])",
       "inject[0].headers \"X\": \"secret\" is missing"},
      {R"([{"match_hosts":["a.com"],"headers":{"X":3}}])", "inject[0].headers \"X\" is neither"},
      {R"([{"match_hosts":["a.com"],"headers":{"X":"K"},"method":1}])",
       "inject[0].method is not a string"},
      {R"([{"match_hosts":["a.com"],"headers":{"X":"bad-name"}}])",
       "secret \"bad-name\" is not a secret name"},
  };
  for (const auto& [json, expected] : cases) {
    auto rules = parse_inject_json(json);
    ASSERT_FALSE(rules) << json;
    EXPECT_EQ(rules.error().kind, ErrorKind::kInvalid);
    EXPECT_NE(rules.error().detail.find(expected), std::string::npos)
        << json << " -> " << rules.error().detail;
  }
}

}  // namespace
}  // namespace hutch::net
