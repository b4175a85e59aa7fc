// atomicMin / atomicMax on a shared variable at the workgroup's scope, as the kernels gather their
// workgroup's key range. GLSL's two-argument forms take Device scope, which a device with
// vulkanMemoryModel enabled (the matrix units' need) allows only with vulkanMemoryModelDeviceScope
// too (VUID-RuntimeSpirv-vulkanMemoryModel-06265, whatever the module's own memory model; the
// validation layer reported it on lavapipe's units); shared memory needs no wider scope. Relaxed,
// of no storage class: the barrier() after them orders them before the variable is read.
#ifndef VKATTN_SHARED_ATOMICS_GLSL
#define VKATTN_SHARED_ATOMICS_GLSL

#extension GL_KHR_memory_scope_semantics : require

#define SHARED_ATOMIC_MIN(mem, value) atomicMin(mem, value, gl_ScopeWorkgroup, gl_StorageSemanticsNone, gl_SemanticsRelaxed)
#define SHARED_ATOMIC_MAX(mem, value) atomicMax(mem, value, gl_ScopeWorkgroup, gl_StorageSemanticsNone, gl_SemanticsRelaxed)

#endif  // VKATTN_SHARED_ATOMICS_GLSL
