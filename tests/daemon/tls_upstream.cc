#include "tests/daemon/tls_upstream.h"

#include <fstream>
#include <sstream>
#include <vector>

namespace hutch::testing {

TlsUpstream::TlsUpstream(const std::string& dir, const std::string& cert, const std::string& key)
    : log_(dir + "/auth.log") {
  const std::string server =
      "import http.server, ssl\n"
      "class H(http.server.BaseHTTPRequestHandler):\n"
      "    protocol_version = 'HTTP/1.1'\n"
      "    def do_GET(self):\n"
      "        with open('" +
      log_ +
      "', 'a') as f:\n"
      "            f.write(self.path + ' ' + self.headers.get('Authorization', '-') + '\\n')\n"
      "        self.send_response(200)\n"
      "        self.send_header('Content-Length', '2')\n"
      "        self.end_headers()\n"
      "        self.wfile.write(b'ok')\n"
      "context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n"
      "context.load_cert_chain('" +
      cert + "', '" + key +
      "')\n"
      "httpd = http.server.HTTPServer(('0.0.0.0', 443), H)\n"
      "httpd.socket = context.wrap_socket(httpd.socket, server_side=True)\n"
      "httpd.serve_forever()\n";
  std::ofstream(dir + "/server.py") << server;
  const std::string script =
      "ip link set lo up && ip addr add 198.51.100.10/32 dev lo && exec python3 " + dir +
      "/server.py";
  server_ = std::make_unique<BackgroundCommand>(
      std::vector<std::string>{"/usr/bin/unshare", "-n", "/bin/sh", "-c", script},
      dir + "/upstream.err");
}

bool TlsUpstream::serving() const {
  std::ifstream tcp("/proc/" + std::to_string(pid()) + "/net/tcp");
  std::string line;
  while (std::getline(tcp, line)) {
    if (line.find("00000000:01BB 00000000:0000 0A") != std::string::npos) return true;
  }
  return false;
}

std::string TlsUpstream::requests() const {
  std::ifstream in(log_, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace hutch::testing
