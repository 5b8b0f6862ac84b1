#!/usr/bin/env bash
# Installs everything on a fresh Debian 12 machine (as root). Idempotent: each step is stamped with
# a hash of its inputs, so a second run on a ready machine checks and changes nothing.
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,3p' "$0" | cut -c3-; exit 0; fi
. "$(dirname "${BASH_SOURCE[0]}")/../env.sh"
STAMPS="$ENVS_ROOT/.stamps"
mkdir -p "$STAMPS"
log() { echo "[setup] $*" >&2; }

APT_PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server
  chromium util-linux procps psmisc libvulkan1 vulkan-tools)
apt_stamp="$(echo "${APT_PACKAGES[*]} mesa-backports" | sha256sum | cut -c1-16)"
if [ ! -f "$STAMPS/apt.$apt_stamp" ]; then
  log "Debian packages (Mesa >= 24.3 from bookworm-backports for CPU Vulkan)"
  src=/etc/apt/sources.list.d/debian.sources
  uri="$(awk '/^URIs:/{print $2; exit}' "$src" 2>/dev/null || true)"
  uri="${uri:-http://deb.debian.org/debian}"
  echo "deb $uri bookworm-backports main" > /etc/apt/sources.list.d/bookworm-backports.list
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${APT_PACKAGES[@]}" >/dev/null
  apt-get install -y -qq --no-install-recommends -t bookworm-backports mesa-vulkan-drivers >/dev/null
  touch "$STAMPS/apt.$apt_stamp"
fi
# The NFS tests (tests/nfs/): a user-mode-linux guest (a Linux kernel run as a process, the host's /
# as its root) runs kernel nfsd and two kernel NFS client mounts; this kernel has no NFS. The guest
# uses the host's binaries: nfsd tools, rpcbind, modprobe (kmod), ip; gcc builds its LD_PRELOAD shim.
NFS_PACKAGES=(user-mode-linux nfs-kernel-server nfs-common rpcbind kmod iproute2 gcc libc6-dev)
nfs_stamp="$(echo "${NFS_PACKAGES[*]}" | sha256sum | cut -c1-16)"
if [ ! -f "$STAMPS/apt-nfs.$nfs_stamp" ]; then
  log "Debian packages for the NFS tests: ${NFS_PACKAGES[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${NFS_PACKAGES[@]}" >/dev/null
  rm -f "$STAMPS/apt-nfs".*
  touch "$STAMPS/apt-nfs.$nfs_stamp"
fi

# LIBERO renders through MuJoCo on Mesa's software rasterizer: EGL (the default) or OSMesa
# (BENCH_PARAMS render: osmesa), from bookworm-backports like the Vulkan driver so Mesa's parts match.
GL_PACKAGES=(libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6)
gl_stamp="$(echo "${GL_PACKAGES[*]}" | sha256sum | cut -c1-16)"
if [ ! -f "$STAMPS/apt-gl.$gl_stamp" ]; then
  log "Debian packages for LIBERO's CPU rendering: ${GL_PACKAGES[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends -t bookworm-backports "${GL_PACKAGES[@]}" >/dev/null
  rm -f "$STAMPS/apt-gl".*
  touch "$STAMPS/apt-gl.$gl_stamp"
fi

make_env() {  # make_env NAME: requirements/NAME.txt (what we ask for) + NAME.lock (pinned versions)
  local name="$1" dir="$ENVS_ROOT/$1" req="$EVAL_ROOT/requirements/$1"
  local stamp; stamp="$(cat "$req.txt" "$req.lock" | sha256sum | cut -c1-16)"
  [ -f "$STAMPS/env-$name.$stamp" ] && [ -x "$dir/bin/python" ] && return 0
  log "python env '$name' from requirements/$name.lock"
  [ -x "$dir/bin/python" ] || python3.11 -m venv "$dir"
  "$dir/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$dir/bin/python" -m pip install -q -r "$req.lock" -r "$req.txt"
  rm -f "$STAMPS/env-$name".*
  touch "$STAMPS/env-$name.$stamp"
}
make_env sim
make_env model
make_env lerobot  # POLICY=lerobot, LeRobot's trainer and lerobot-eval: its own pins (requirements/lerobot.txt)
# MIKASA-Robo (vla-eval's ManiSkill3 memory tasks, run by tests/episode/test_bench_vlaeval.py) pins
# mani_skill 3.0.0b15, numpy 1.23.5 and torch 2.2.1 but runs unchanged on the sim env's versions: it is
# installed without its dependencies, so that pip leaves the simulator's pins alone.
MIKASA_PIN="mikasa-robo-suite==1.0.0"
if [ ! -f "$STAMPS/mikasa.$MIKASA_PIN" ]; then
  log "sim env: $MIKASA_PIN (--no-deps)"
  "$SIM_PY" -m pip install -q --no-deps "$MIKASA_PIN"
  rm -f "$STAMPS/mikasa".*
  touch "$STAMPS/mikasa.$MIKASA_PIN"
fi
# MetaWorld's scripted policies for policy/metaworld_oracle, in the model env: the package without its
# dependencies (gymnasium, MuJoCo: the oracle imports only its numpy policies), at the sim env's pin.
MW_PIN="$(grep -E '^metaworld==' "$EVAL_ROOT/requirements/sim.txt")"
if [ ! -f "$STAMPS/model-metaworld.$MW_PIN" ]; then
  log "model env: $MW_PIN (--no-deps)"
  "$MODEL_PY" -m pip install -q --no-deps "$MW_PIN"
  rm -f "$STAMPS/model-metaworld".*
  touch "$STAMPS/model-metaworld.$MW_PIN"
fi
# Local wheelhouse for SIM_PIN (offline installs on nodes; the pin tests use two sapien builds).
WHEELHOUSE_PINS=(sapien==3.0.2 sapien==3.0.3 "setuptools<81")
wh_stamp="$(echo "${WHEELHOUSE_PINS[*]}" | sha256sum | cut -c1-16)"
if [ ! -f "$STAMPS/wheelhouse.$wh_stamp" ]; then
  log "wheelhouse $ENVS_ROOT/wheelhouse: ${WHEELHOUSE_PINS[*]}"
  mkdir -p "$ENVS_ROOT/wheelhouse"
  for pin in "${WHEELHOUSE_PINS[@]}"; do
    "$SIM_PY" -m pip download -q --no-deps --only-binary=:all: -d "$ENVS_ROOT/wheelhouse" "$pin"
  done
  touch "$STAMPS/wheelhouse.$wh_stamp"
fi
# The renderer's BRDF table, kept in the sim env so no sim process builds it (harness/episode/bench/brdf_lut.py).
lut_stamp="$(sha256sum < "$(dirname "${BASH_SOURCE[0]}")/../harness/episode/bench/brdf_lut.py" | cut -c1-16)"
if [ ! -f "$STAMPS/brdf-lut.$lut_stamp" ]; then
  log "sim env: the renderer's BRDF table"
  "$SIM_PY" -m harness.episode.bench.brdf_lut >/dev/null
  rm -f "$STAMPS/brdf-lut".*
  touch "$STAMPS/brdf-lut.$lut_stamp"
fi
log "ready: SIM_PY=$SIM_PY MODEL_PY=$MODEL_PY LEROBOT_PY=$LEROBOT_PY"
