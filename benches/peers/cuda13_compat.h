// Force-included (nvcc -include) when building the HPEC peers (SNICIT, SNIG) with CUDA 13.
// Our own shim, not peer code: CUDA 13 changed a few runtime signatures that the peers' 2021-2023
// sources (and their bundled Taskflow) call in the CUDA 11/12 form. Each overload below forwards
// the old form to the new one with the same meaning; none of them is on a timed path except the
// prefetch hints in SNIG's setup. Nothing here changes a kernel.
#pragma once
#include <cuda_runtime.h>
#include <thrust/reduce.h>              // CCCL 3 no longer pulls these in transitively
#include <thrust/functional.h>
#include <thrust/execution_policy.h>

#if defined(CUDART_VERSION) && CUDART_VERSION >= 13000
// CUDA 13: graph edges carry cudaGraphEdgeData (nullptr = plain dependencies, as before).
inline cudaError_t cudaGraphGetEdges(cudaGraph_t g, cudaGraphNode_t* from, cudaGraphNode_t* to, size_t* n) {
  return ::cudaGraphGetEdges(g, from, to, static_cast<cudaGraphEdgeData*>(nullptr), n);
}
inline cudaError_t cudaGraphAddDependencies(cudaGraph_t g, const cudaGraphNode_t* from,
                                            const cudaGraphNode_t* to, size_t n) {
  return ::cudaGraphAddDependencies(g, from, to, static_cast<const cudaGraphEdgeData*>(nullptr), n);
}
inline cudaError_t cudaGraphRemoveDependencies(cudaGraph_t g, const cudaGraphNode_t* from,
                                               const cudaGraphNode_t* to, size_t n) {
  return ::cudaGraphRemoveDependencies(g, from, to, static_cast<const cudaGraphEdgeData*>(nullptr), n);
}
inline cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t* deps, size_t* n) {
  return ::cudaGraphNodeGetDependencies(node, deps, static_cast<cudaGraphEdgeData*>(nullptr), n);
}
inline cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t* deps, size_t* n) {
  return ::cudaGraphNodeGetDependentNodes(node, deps, static_cast<cudaGraphEdgeData*>(nullptr), n);
}
// CUDA 13: managed-memory hints name a cudaMemLocation instead of a device ordinal
// (cudaCpuDeviceId, -1, means the host).
inline cudaMemLocation spartac_peer_location(int device) {
  cudaMemLocation loc{};
  if (device == cudaCpuDeviceId) {
    loc.type = cudaMemLocationTypeHost;
    loc.id = 0;
  } else {
    loc.type = cudaMemLocationTypeDevice;
    loc.id = device;
  }
  return loc;
}
inline cudaError_t cudaMemPrefetchAsync(const void* p, size_t n, int device, cudaStream_t s = 0) {
  return ::cudaMemPrefetchAsync(p, n, spartac_peer_location(device), 0u, s);
}
inline cudaError_t cudaMemAdvise(const void* p, size_t n, cudaMemoryAdvise advice, int device) {
  return ::cudaMemAdvise(p, n, advice, spartac_peer_location(device));
}
#endif
