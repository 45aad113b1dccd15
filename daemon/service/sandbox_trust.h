// A filtered or open sandbox's side of TLS termination that outlives a hutchd: its CA (key and
// certificate) and its placeholder key, kept in hutchd's state under the sandbox's dir, and the
// trust files the sandbox sees, bound read-only into it from there at its start, so that none is
// ever written into its upper layer (nor into its snapshots, recipes or forks):
//
//   <sandbox dir>/ca/            0700  hutchd's
//     key.pem                    0600  the first CA's private key (PKCS#8 PEM)
//     current.pem                0600  after a rotation: the CA's key, then its certificate
//     next.pem                   0600  during a rotation: the next CA's key and certificate
//     placeholder.key            0600  the placeholders' HMAC key (32 bytes)
//     public/                    0755  bound read-only at /etc/hutch
//       sandbox-ca.pem           0644  the CA's certificate (then each next CA's)
//       ca-bundle.pem            0644  the host's roots, then the CA (then each next CA); also
//                                      bound over each distro bundle path the sandbox's rootfs has
//
// Rotation: a CA is valid for a week (SandboxCaOptions::validity). Before it ends, a next CA is
// made and its certificate appended to both public files, in place (the binds show the same
// inodes: every process that reads them from then on trusts both); later the next CA takes over
// (next.pem renamed over current.pem) and the engine signs with it. A process that read the
// files before the next CA was announced and still runs at the switch fails to verify.
//
// A trust dir is made whole elsewhere (TrustPool's dir, ahead of creates) and renamed into
// place, so a sandbox's dir never holds half of one. A restarted hutchd loads it back: the
// sandbox keeps the CA it trusts and the placeholders its processes hold. It goes with the
// sandbox's dir.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/service/made_ahead.h"
#include "net/inject.h"
#include "net/tls/sandbox_ca.h"
#include "net/tls/trust_bundle.h"
#include "runtime/base/error.h"
#include "runtime/spec.h"

namespace hutch::daemon::service {

inline constexpr std::string_view kTrustDir = "ca";  // in the sandbox's dir
// Inside the sandbox.
inline constexpr std::string_view kTrustMount = "/etc/hutch";
inline constexpr std::string_view kTrustBundlePath = "/etc/hutch/ca-bundle.pem";
inline constexpr std::string_view kTrustCaPath = "/etc/hutch/sandbox-ca.pem";

struct SandboxTrust {
  std::shared_ptr<net::tls::SandboxCa> ca;
  net::PlaceholderKey placeholder_key{};
  // The CA announced to take over from `ca` (trusted already), or null.
  std::shared_ptr<net::tls::SandboxCa> next;
};

// When a CA's successor is announced and when it takes over, as fractions of the CA's validity
// left: 3/7 and 1/7 of a week are 3 days and 1 day, so a process started up to two days before
// the switch lives through it.
struct CaRotation {
  std::chrono::seconds validity = std::chrono::hours(24 * 7);  // of each CA made
  std::chrono::seconds announce_before() const { return validity * 3 / 7; }
  std::chrono::seconds switch_before() const { return validity / 7; }
  // How often hutchd looks: a minute, or less for a CA valid under 50 minutes (tests).
  std::chrono::milliseconds check_interval() const {
    return std::clamp<std::chrono::milliseconds>(
        std::chrono::duration_cast<std::chrono::milliseconds>(validity) / 50,
        std::chrono::milliseconds(100), std::chrono::minutes(1));
  }
};

enum class RotationStep : uint8_t { kNone, kAnnounce, kSwitch };
// Pure: what a sandbox's trust needs at `now`, its current CA ending at `not_after`. An announce
// comes first, however late; the switch at a later look.
RotationStep rotation_step(std::chrono::system_clock::time_point not_after, bool announced,
                           std::chrono::system_clock::time_point now, const CaRotation& rotation);

// A next CA for the trust in `<sandbox_dir>/ca`: ca/next.pem written (whole, by rename), then its
// certificate appended to public/sandbox-ca.pem and public/ca-bundle.pem, each in one write.
Result<std::shared_ptr<net::tls::SandboxCa>> announce_next_ca(const std::string& sandbox_dir,
                                                              std::chrono::seconds validity);
// The announced CA takes over: ca/next.pem renamed over ca/current.pem (key.pem, the first CA's,
// removed). Both stay trusted inside; the old one until it expires.
Result<void> switch_to_next_ca(const std::string& sandbox_dir);

// A new CA and placeholder key, with the files above in `path` (a new directory: it must not
// exist; removed again on failure), the bundle from the roots file `roots_path`.
Result<SandboxTrust> make_trust_dir(
    const std::string& path, const std::string& roots_path = std::string(net::tls::kHostRootsPath),
    std::chrono::seconds validity = CaRotation{}.validity);

// The trust kept in `<sandbox_dir>/ca`, an announced next CA with it (appended to the public
// files again if a crash came between its file and the appends). Errors: ErrorKind::kNotFound
// when there is none (a sandbox of a hutchd from before it was kept), the files' and the CA's
// otherwise.
Result<SandboxTrust> load_trust(const std::string& sandbox_dir);

// The binds of a sandbox's spec: public/ at /etc/hutch (opened by the launcher: the state dir is
// 0700), then its ca-bundle.pem over each of net::tls::sandbox_bundle_paths() that the rootfs
// has as a regular file. Read-only, nosuid, nodev.
std::vector<BindMount> trust_binds(const std::string& sandbox_dir);

// A trust dir made ahead in TrustPool's dir, with the empty files made with it (`files`: pool
// path -> name in the sandbox's dir): removed with this unless placed into a sandbox's.
class AheadTrust {
 public:
  AheadTrust(std::string path, SandboxTrust trust,
             std::vector<std::pair<std::string, std::string>> files)
      : path_(std::move(path)), trust_(std::move(trust)), files_(std::move(files)) {}
  AheadTrust(AheadTrust&& other) noexcept
      : path_(std::exchange(other.path_, {})),
        trust_(std::move(other.trust_)),
        files_(std::exchange(other.files_, {})) {}
  AheadTrust& operator=(AheadTrust&&) = delete;
  AheadTrust(const AheadTrust&) = delete;
  ~AheadTrust();

  // A new empty file at `path` (in the pool's dir) that place() renames to <sandbox_dir>/<name>.
  Result<void> add_empty_file(std::string path, std::string name);
  // Renames the dir to <sandbox_dir>/ca and each file to <sandbox_dir>/<name> (the same
  // filesystem: the state dir's).
  Result<SandboxTrust> place(const std::string& sandbox_dir);

 private:
  std::string path_;  // "" once placed or moved from
  SandboxTrust trust_;
  std::vector<std::pair<std::string, std::string>> files_;  // those not placed yet
};

// Sandbox CAs made ahead (made_ahead.h), so a filtered create pays neither for the keys and
// the certificate (~0.3 ms) nor for the ~200 KiB bundle's write: the create renames a trust
// dir into its sandbox's dir and binds it.
class TrustPool {
 public:
  // `dir`: hutchd's (<state>/ca-ahead), emptied of what a previous hutchd left there. size 0 or
  // dir "": nothing made ahead. `empty_files`: files a sandbox's dir gets, empty, from a CA made
  // ahead (never from one made at the create): creating a file costs ~70 µs on ext4 (its
  // inode's allocation), a rename ~10 µs.
  TrustPool(std::string dir, size_t size, std::vector<std::string> empty_files = {},
            std::chrono::seconds validity = CaRotation{}.validity);
  TrustPool(const TrustPool&) = delete;
  TrustPool& operator=(const TrustPool&) = delete;

  // The trust of a new sandbox, in `<sandbox_dir>/ca`: one made ahead when ready, else made now.
  Result<SandboxTrust> provision(const std::string& sandbox_dir);

  using Hold = MadeAhead<AheadTrust>::Hold;
  [[nodiscard]] Hold hold() { return ahead_.hold(); }

  size_t size() const { return ahead_.size(); }
  size_t ready() const { return ahead_.ready(); }

 private:
  Result<AheadTrust> make_one();

  const std::string dir_;
  const std::vector<std::string> empty_files_;
  const std::chrono::seconds validity_;
  std::atomic<uint64_t> made_ = 0;  // names the pool's dirs
  MadeAhead<AheadTrust> ahead_;     // last: its thread calls make_one()
};

}  // namespace hutch::daemon::service
