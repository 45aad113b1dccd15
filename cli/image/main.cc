// hutch-image: `hutch image export|load|import|ls|rm`, working on the state dir directly (no
// hutchd). A separate, dynamically linked executable because it links libarchive, whose compression
// libraries Debian does not all ship as static archives; `hutch` execs it for `hutch image`.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/image/images.h"
#include "cli/image/layer_archive.h"
#include "cli/image/rootfs_import.h"
#include "runtime/base/unique_fd.h"
#include "runtime/layers/layer_store.h"

namespace {

int fail(const hutch::Error& error) {
  std::fflush(stdout);
  std::fprintf(stderr, "hutch image: %s\n", error.message().c_str());
  return 1;
}

// A stable code for an `image rm --json` failure.
const char* error_code(const hutch::Error& error) {
  if (error.err == ENOENT) return "not_found";
  if (error.err == EBUSY) return "in_use";
  return "failed";
}

int list_images(const hutch::layers::LayerStore& store, bool json) {
  auto images = hutch::image::list_images(store);
  if (!images) return fail(images.error());
  nlohmann::json out = nlohmann::json::array();
  for (const hutch::image::ImageRecord& image : *images) {
    if (json) {
      out.push_back({{"name", image.name},
                     {"digest", image.digest},
                     {"size", image.size},
                     {"created", image.created},
                     {"platform", image.platform},
                     {"source", image.source},
                     {"rootfs", store.state_dir() + "/images/" + image.name + "/rootfs"}});
      continue;
    }
    char created[32] = "";
    const time_t when = static_cast<time_t>(image.created);
    std::tm utc;
    if (gmtime_r(&when, &utc) != nullptr)
      std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &utc);
    std::printf("%-24s %s %12llu bytes  %s  %s\n", image.name.c_str(), image.digest.c_str(),
                static_cast<unsigned long long>(image.size), created,
                image.platform.empty() ? "-" : image.platform.c_str());
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int remove_image(hutch::layers::LayerStore& store, const std::string& name, bool json) {
  auto recipes = hutch::image::remove_image(store, name);
  if (!recipes) {
    if (json) {
      std::printf("%s\n", nlohmann::json{{"name", name},
                                         {"error", recipes.error().message()},
                                         {"code", error_code(recipes.error())}}
                              .dump()
                              .c_str());
    }
    return fail(recipes.error());
  }
  for (const std::string& recipe : *recipes) {
    std::fprintf(stderr,
                 "hutch image: recipe %s was baked on image %s: it cannot run until an image of "
                 "that name is imported again\n",
                 recipe.c_str(), name.c_str());
  }
  if (json) {
    std::printf(
        "%s\n",
        nlohmann::json{{"name", name}, {"removed", true}, {"recipes", *recipes}}.dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hutch;
  CLI::App app{"hutch image: move layers between machines, import base rootfs images", "hutch"};
  app.require_subcommand(1);
  app.fallthrough();
  std::string state_dir = "/var/lib/hutch";
  if (const char* env = std::getenv("HUTCH_STATE_DIR"); env != nullptr && *env != '\0')
    state_dir = env;
  app.add_option("--state-dir", state_dir,
                 "State directory (default $HUTCH_STATE_DIR or /var/lib/hutch)");
  CLI::App* image =
      app.add_subcommand("image", "Layer export/load, rootfs import, imported images ls/rm");
  image->require_subcommand(1);

  std::string export_ref, export_out = "-";
  bool zstd = false;
  CLI::App* export_cmd = image->add_subcommand(
      "export", "Write a layer and its parents as a tar stream (OCI layer tars inside)");
  export_cmd->add_option("layer", export_ref, "A tag or sha256:DIGEST")->required();
  export_cmd->add_option("-o,--output", export_out, "Output file, or - for stdout (default)");
  export_cmd->add_flag("--zstd", zstd, "Compress the stream with zstd");

  std::string load_in, load_name;
  CLI::App* load_cmd = image->add_subcommand(
      "load", "Add the layers of an exported stream (digests verified) and tag the top one");
  load_cmd->add_option("file", load_in, "The stream, or - for stdin")->required();
  load_cmd->add_option("--name", load_name, "Tag (default: the tag recorded by export)");

  std::string import_source, import_name, import_platform;
  CLI::App* import_cmd = image->add_subcommand(
      "import",
      "A base rootfs from a rootfs tar (docker/podman export), an OCI layout (dir or tar) or a "
      "docker save tar; use it as --rootfs image:NAME");
  import_cmd->add_option("source", import_source, "FILE or DIR")->required();
  import_cmd->add_option("--name", import_name, "Image name")->required();
  import_cmd->add_option("--platform", import_platform,
                         "os/arch[/variant] to take from a multi-platform index (default: this "
                         "host's, e.g. linux/amd64)");

  bool ls_json = false;
  CLI::App* ls_cmd =
      image->add_subcommand("ls", "List imported images (name, digest, size, created)");
  ls_cmd->add_flag("--json", ls_json, "JSON output");

  std::string rm_name;
  bool rm_json = false;
  CLI::App* rm_cmd = image->add_subcommand(
      "rm", "Remove an imported image (refused while a running sandbox uses it)");
  rm_cmd->add_option("name", rm_name, "Image name")->required();
  rm_cmd->add_flag("--json", rm_json, "JSON output");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  state_dir = std::filesystem::absolute(state_dir).lexically_normal().string();
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());

  if (ls_cmd->parsed()) return list_images(*store, ls_json);
  if (rm_cmd->parsed()) return remove_image(*store, rm_name, rm_json);
  if (export_cmd->parsed()) {
    UniqueFd file;
    int fd = STDOUT_FILENO;
    if (export_out != "-") {
      file = UniqueFd(::open(export_out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!file) return fail(sys_error("open", export_out).error());
      fd = file.get();
    } else if (isatty(STDOUT_FILENO)) {
      return fail(
          plain_error("export", "refusing to write a tar to a terminal (use -o FILE)").error());
    }
    if (auto done = image::export_layer(*store, export_ref, fd, zstd); !done)
      return fail(done.error());
    if (file && fsync(file.get()) != 0) return fail(sys_error("fsync", export_out).error());
    return 0;
  }
  if (load_cmd->parsed()) {
    UniqueFd file;
    int fd = STDIN_FILENO;
    if (load_in != "-") {
      file = UniqueFd(::open(load_in.c_str(), O_RDONLY | O_CLOEXEC));
      if (!file) return fail(sys_error("open", load_in).error());
      fd = file.get();
    }
    auto digest = image::load_layers(*store, fd, load_name);
    if (!digest) return fail(digest.error());
    std::printf("%s\n", digest->c_str());
    return 0;
  }
  auto platform =
      import_platform.empty() ? image::host_platform() : image::parse_platform(import_platform);
  if (!platform) return fail(platform.error());
  auto path = image::import_rootfs(*store, import_source, import_name, *platform);
  if (!path) return fail(path.error());
  std::printf("%s\n", path->c_str());
  return 0;
}
