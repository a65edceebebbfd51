# Sourced by setup_llama_server.sh and setup_llama_cpp_python.sh: what building llama.cpp
# portably needs, said in one line rather than failing obscurely later. Exits 3 when missing.
#
# Usage: llama_build_checks "<what is built>"
llama_build_checks() {
    local tool
    for tool in cmake c++ cc; do
        command -v "$tool" >/dev/null 2>&1 || {
            echo "No $tool on this machine: $1 cannot be built (apt-get install cmake g++)." >&2
            exit 3
        }
    done
    # GGML_NATIVE=OFF enables AVX2/FMA/F16C: on an older CPU the build would die with SIGILL
    if [[ "$(uname -m)" == "x86_64" ]] && ! grep -qw avx2 /proc/cpuinfo; then
        echo "This CPU has no AVX2; the portable $1 build (x86-64-v3) cannot run here." >&2
        exit 3
    fi
}
