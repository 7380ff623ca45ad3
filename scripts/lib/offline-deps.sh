# Sourced by scripts/test and scripts/start: the system packages the offline model's build needs
# (llama.cpp compiles with CMake and bindgen, which needs libclang), installed when missing so a
# fresh machine needs no manual step. A missing tool or failed install stops the caller loudly.
missing=()
command -v cmake >/dev/null || missing+=(cmake)
dpkg-query -W -f='${Status}' libclang-dev 2>/dev/null | grep -q "ok installed" || missing+=(libclang-dev)
if ((${#missing[@]})); then
  echo "installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
