// A pure-Python package on a PEP 503 "simple" index that the network tests serve from U, for pip
// inside a sandbox: the wheel is written by python3's zipfile (no build tools on the host).
#pragma once

#include <string>

namespace hutch::testing {

// A shell snippet (for sh -c, with $PUB set) that writes $PUB/files/NAME-1.0-py3-none-any.whl,
// whose one module NAME/__init__.py holds `init_py` (which must not contain '''), and
// $PUB/simple/NAME/index.html linking it.
inline std::string publish_wheel_sh(const std::string& name, const std::string& init_py) {
  const std::string wheel = name + "-1.0-py3-none-any.whl";
  return "mkdir -p \"$PUB/simple/" + name + "\" \"$PUB/files\"\n" + "python3 - \"$PUB/files/" +
         wheel + "\" " + name + " <<'PY'\n" +
         R"py(import base64, hashlib, sys, zipfile
name = sys.argv[2]
info = name + "-1.0.dist-info/"
files = {
    name + "/__init__.py": b''')py" +
         init_py + R"py(''',
    info + "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
    info + "WHEEL":
        b"Wheel-Version: 1.0\nGenerator: hutch-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = ""
for path, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record += f"{path},sha256={digest},{len(data)}\n"
record += info + "RECORD,,\n"
with zipfile.ZipFile(sys.argv[1], "w") as wheel:
    for path, data in files.items():
        wheel.writestr(path, data)
    wheel.writestr(info + "RECORD", record)
PY
)py" + "printf '<a href=\"../../files/" +
         wheel + "\">" + wheel + "</a>\\n' > \"$PUB/simple/" + name + "/index.html\"\n";
}

}  // namespace hutch::testing
