# Sourced by the GPU scripts that build a pack with the vendor tactic (src/vendor_cublaslt.cpp) by hand or link
# its PyTorch extension: where cuBLASLt's header and library are. The pack's CMake project finds them itself
# (cmake/cutegen_cublaslt.cmake), reading CUTEGEN_CUBLASLT_ROOT first.
#   cublaslt_root PY CUDA_HOME   a folder with include/cublasLt.h and lib/ or lib64/ holding libcublasLt.so*: the
#                                toolkit's, else the nvidia-cublas wheel of PY (PyTorch's CUDA 13 wheels depend on it)
#   cublaslt_lib ROOT            the library file under it (the wheel ships libcublasLt.so.13 alone)
cublaslt_root() {
  local py=$1 cuda=$2
  if [ -n "$cuda" ] && [ -f "$cuda/include/cublasLt.h" ] && ls "$cuda"/lib64/libcublasLt.so* > /dev/null 2>&1; then
    echo "$cuda"
    return 0
  fi
  "$py" -c "import os, nvidia.cu13 as m; print(next(p for p in m.__path__ if os.path.isfile(os.path.join(p, 'include', 'cublasLt.h'))))" 2> /dev/null
}
cublaslt_lib() { ls "$1"/lib64/libcublasLt.so* "$1"/lib/libcublasLt.so* 2> /dev/null | sort | head -1; }
