// hutch-client: the `hutch` verbs that talk to hutchd (create, ls, inspect, exec, cp, rm, pause,
// resume, logs). `hutch` execs this binary for them: it links cpp-httplib, which Debian ships
// only as a shared library, while `hutch` itself stays fully static.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/client/verbs.h"

namespace hutch::client {
namespace {

constexpr const char* kFooter =
    "hutchd is found at --socket PATH ($HUTCH_SOCKET, default /run/hutch/hutchd.sock), or\n"
    "--url http://HOST:PORT with --token-file FILE; both go before or after the verb.\n"
    "Exit status: 0 on success; exec exits with the command's status (124 on timeout, 128+N\n"
    "when killed by signal N); 125 when hutchd answers an error (printed as\n"
    "\"hutch: <code>: <message>\"), cannot be reached, or the arguments are wrong.\n";

Result<std::string> read_token(const std::string& path) {
  std::ifstream file(path);
  if (!file) return sys_error("open", path);
  std::stringstream text;
  text << file.rdbuf();
  std::string token = text.str();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) return plain_error("token file", path + " is empty");
  return token;
}

Result<std::string> read_stdin() {
  std::string data;
  char buffer[65536];
  while (true) {
    ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("read", "stdin");
    if (n == 0) return data;
    data.append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace
}  // namespace hutch::client

int main(int argc, char** argv) {
  using namespace hutch::client;
  CLI::App app{"hutch: lightweight Linux sandboxes (client verbs: talk to hutchd)", "hutch"};
  app.footer(kFooter);
  app.require_subcommand(1);
  // Every verb takes the connection options after its name too (hutch ls --socket S); set
  // before the verbs are added, which inherit it.
  app.fallthrough();
  Endpoint endpoint;
  if (const char* env = std::getenv("HUTCH_SOCKET"); env != nullptr && *env != '\0')
    endpoint.socket_path = env;
  std::string token_file;
  app.add_option("--socket", endpoint.socket_path,
                 "hutchd's unix socket (default $HUTCH_SOCKET or /run/hutch/hutchd.sock)");
  app.add_option("--url", endpoint.url, "hutchd over TCP instead: http://127.0.0.1:PORT");
  app.add_option("--token-file", token_file, "File holding the bearer token for --url");

  CreateOptions create;
  bool create_json = false;
  CLI::App* create_cmd = app.add_subcommand("create", "Create a sandbox and print its id");
  create_cmd->add_option("--rootfs", create.rootfs,
                         "\"host\" (default) or a rootfs directory on the daemon's host");
  create_cmd->add_option("--recipe", create.recipe,
                         "Start from a recipe or snapshot (hutch recipe build, POST .../snapshot)");
  create_cmd->add_option("--memory", create.memory, "Memory limit (512M, 2G)");
  create_cmd->add_option("--pids", create.pids, "Maximum number of processes and threads");
  create_cmd->add_option("--cpus", create.cpus, "CPU time limit in CPUs (0.5 = half of one)");
  create_cmd->add_option("--disk", create.disk, "Cap of the writable layer (1G)");
  create_cmd->add_option("--env", create.env, "K=V for every command (repeatable)")
      ->allow_extra_args(false);
  create_cmd->add_option("--label", create.labels, "k=v label (repeatable)")
      ->allow_extra_args(false);
  create_cmd->add_option("--idle-ttl", create.idle_ttl,
                         "Destroy after this long without activity (600, 10m; 0: never)");
  create_cmd->add_option("--timeout", create.timeout, "Default exec timeout (600, 30s; 0: none)");
  create_cmd
      ->add_option("--net", create.network,
                   "none | loopback | filtered | open (rules: PUT .../network)")
      ->check(CLI::IsMember({"none", "loopback", "filtered", "open"}));
  create_cmd
      ->add_option("--volume", create.volumes,
                   "NAME:/target[:ro]: mount a persistent volume (hutch volume create; repeatable)")
      ->allow_extra_args(false);
  create_cmd->add_flag("--json", create_json, "Print the whole sandbox object");

  std::vector<std::string> ls_labels;
  bool ls_json = false;
  CLI::App* ls_cmd = app.add_subcommand("ls", "List sandboxes (ID STATE CREATED LABELS)");
  ls_cmd->add_option("--label", ls_labels, "Only sandboxes with label k=v (repeatable)")
      ->allow_extra_args(false);
  ls_cmd->add_flag("--json", ls_json, "JSON array of sandbox objects");

  std::string inspect_id;
  CLI::App* inspect_cmd = app.add_subcommand("inspect", "Print a sandbox's JSON");
  inspect_cmd->add_option("id", inspect_id, "Sandbox id")->required();

  ExecOptions exec;
  std::string exec_id;
  bool exec_stdin = false;
  bool exec_json = false;
  CLI::App* exec_cmd = app.add_subcommand(
      "exec", "Run a command in a sandbox; stream its output and exit with its status");
  exec_cmd->add_option("--workdir", exec.workdir, "Working directory inside");
  exec_cmd->add_option("--env", exec.env, "K=V for this command (repeatable)")
      ->allow_extra_args(false);
  exec_cmd->add_option("--timeout", exec.timeout,
                       "Kill the command's tree after DURATION (30, 500ms, 2m); exit 124");
  exec_cmd->add_flag("-i,--interactive", exec_stdin,
                     "Pass this process's stdin (read to its end first) to the command");
  exec_cmd->add_flag("-d,--background", exec.background,
                     "Start in the background and print its pid (see hutch logs ID PID)");
  exec_cmd->add_flag("--json", exec_json,
                     "Buffer, then print the result object (stdout, stderr, exit_code, ...)");
  exec_cmd->add_option("id", exec_id, "Sandbox id")->required();
  exec_cmd->add_option("command", exec.argv, "CMD [ARGS...] (after --)")->required();

  std::string cp_source, cp_destination;
  CLI::App* cp_cmd = app.add_subcommand(
      "cp", "Copy a file: SRC DST, one of them ID:/path in a sandbox; - is stdin/stdout");
  cp_cmd->add_option("source", cp_source, "Host path, -, or ID:/path")->required();
  cp_cmd->add_option("destination", cp_destination, "Host path, -, or ID:/path")->required();

  std::vector<std::string> rm_ids;
  CLI::App* rm_cmd = app.add_subcommand("rm", "Destroy sandboxes (no error if already gone)");
  rm_cmd->add_option("ids", rm_ids, "Sandbox ids")->required();

  std::string pause_id, resume_id;
  CLI::App* pause_cmd = app.add_subcommand("pause", "Freeze every process of a sandbox");
  pause_cmd->add_option("id", pause_id, "Sandbox id")->required();
  CLI::App* resume_cmd = app.add_subcommand("resume", "Thaw a paused sandbox");
  resume_cmd->add_option("id", resume_id, "Sandbox id")->required();

  ProcessOutputOptions output;
  CLI::App* logs_cmd = app.add_subcommand(
      "logs", "A sandbox's event log, or with PID a background process's output");
  logs_cmd->add_option("id", output.id, "Sandbox id")->required();
  logs_cmd->add_option("pid", output.pid, "Background process id (from exec -d)");
  logs_cmd->add_option("--stream", output.stream, "stdout | stderr (with PID)")
      ->check(CLI::IsMember({"stdout", "stderr"}));
  logs_cmd->add_flag("-f,--follow", output.follow, "Follow until the process exits (with PID)");

  std::string shell_id;
  std::vector<std::string> shell_argv;
  CLI::App* shell_cmd = app.add_subcommand(
      "shell", "An interactive terminal in a sandbox (its /bin/sh, or CMD); exits with its status");
  shell_cmd->add_option("id", shell_id, "Sandbox id")->required();
  shell_cmd->add_option("command", shell_argv, "CMD [ARGS...] (after --)");

  std::string forward_id;
  uint16_t forward_port = 0, forward_local_port = 0;
  CLI::App* forward_cmd = app.add_subcommand(
      "port-forward", "Forward 127.0.0.1:LOCAL_PORT to a sandbox's PORT through hutchd");
  forward_cmd->add_option("id", forward_id, "Sandbox id")->required();
  forward_cmd->add_option("port", forward_port, "The port inside the sandbox (1-65535)")
      ->required()
      ->check(CLI::Range(1, 65535));
  forward_cmd->add_option("local_port", forward_local_port, "Local port (default: PORT)")
      ->check(CLI::Range(1, 65535));

  CLI::App* volume_cmd =
      app.add_subcommand("volume", "Persistent volumes: create NAME SIZE, ls, rm NAME...");
  volume_cmd->require_subcommand(1);
  std::string volume_name, volume_size;
  CLI::App* volume_create_cmd =
      volume_cmd->add_subcommand("create", "Create a volume of SIZE (1G, 512M): its quota");
  volume_create_cmd->add_option("name", volume_name, "[A-Za-z0-9][A-Za-z0-9_.-]*")->required();
  volume_create_cmd->add_option("size", volume_size, "Size (16M to 1T, a multiple of 4K)")
      ->required();
  bool volume_ls_json = false;
  CLI::App* volume_ls_cmd =
      volume_cmd->add_subcommand("ls", "List volumes (NAME SIZE USED ATTACHED)");
  volume_ls_cmd->add_flag("--json", volume_ls_json, "JSON array of volume objects");
  std::vector<std::string> volume_rm_names;
  CLI::App* volume_rm_cmd =
      volume_cmd->add_subcommand("rm", "Delete volumes and their files (not while attached)");
  volume_rm_cmd->add_option("names", volume_rm_names, "Volume names")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitClientFailure;
  }

  if (!token_file.empty()) {
    auto token = read_token(token_file);
    if (!token) return fail(token.error());
    endpoint.token = *token;
  }
  Connection daemon(endpoint);
  if (create_cmd->parsed()) {
    if (create.rootfs != "host") {
      std::error_code ec;
      create.rootfs = std::filesystem::absolute(create.rootfs, ec).lexically_normal().string();
    }
    return create_sandbox(daemon, create, create_json);
  }
  if (ls_cmd->parsed()) return list_sandboxes(daemon, ls_labels, ls_json);
  if (volume_create_cmd->parsed()) return create_volume(daemon, volume_name, volume_size);
  if (volume_ls_cmd->parsed()) return list_volumes(daemon, volume_ls_json);
  if (volume_rm_cmd->parsed()) return remove_volumes(daemon, volume_rm_names);
  if (inspect_cmd->parsed()) return inspect_sandbox(daemon, inspect_id);
  if (exec_cmd->parsed()) {
    if (exec_stdin) {
      auto data = read_stdin();
      if (!data) return fail(data.error());
      exec.stdin_data = std::move(*data);
    }
    return exec_command(daemon, exec_id, exec, exec_json);
  }
  if (cp_cmd->parsed()) return copy_file(daemon, cp_source, cp_destination);
  if (forward_cmd->parsed())
    return port_forward(endpoint, forward_id, forward_port,
                        forward_local_port == 0 ? forward_port : forward_local_port);
  if (shell_cmd->parsed()) return open_shell(endpoint, shell_id, shell_argv);
  if (rm_cmd->parsed()) return remove_sandboxes(daemon, rm_ids);
  if (pause_cmd->parsed()) return change_sandbox_state(daemon, pause_id, "pause");
  if (resume_cmd->parsed()) return change_sandbox_state(daemon, resume_id, "resume");
  if (!output.pid.empty()) return show_process_output(daemon, output);
  if (output.follow || logs_cmd->count("--stream") > 0)
    return fail(hutch::Error{"logs", "--stream and --follow need a PID", 0});
  return show_sandbox_log(daemon, output.id);
}
