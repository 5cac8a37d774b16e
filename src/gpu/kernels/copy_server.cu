// The copy server of stream-ordered async I/O (see src/stream.rs): one
// kernel per operation, enqueued on the caller's stream at submission. It
// copies between device memory and pinned, device-mapped host slots as the
// host's worker thread posts descriptors, so the worker itself makes no GPU
// runtime call (none that could wait behind another thread's cudaFree).
//
// Each block serves its own `depth` slots in turn. For step s of a block,
// slot s % depth: the host fills the descriptor, then stores
// tag = gen << 32 | (s + 1); the block waits for that tag, copies `count`
// bytes from `src` to `dst` (op 0) or ends the kernel (op 1), and stores
// done = the same value. `gen` is unique per operation, so tags left by an
// earlier operation on the same slots never match.
//
// Regenerate copy_server.ptx with scripts/gpu/gen-copy-server-ptx.py.

typedef unsigned long long u64;

struct Slot {
    u64 tag;
    u64 done;
    u64 src;
    u64 dst;
    u64 count;
    u64 op;
    u64 pad0;
    u64 pad1;
};

// System-scope acquire/release: the other side is a CPU thread.
__device__ __forceinline__ u64 load_acquire(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void store_release(u64* p, u64 v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

extern "C" __global__ void hipfs_copy_server(Slot* slots, unsigned depth, unsigned gen) {
    Slot* mine = slots + (u64)blockIdx.x * depth;
    __shared__ u64 s_src, s_dst, s_count, s_op;
    for (unsigned step = 0;; ++step) {
        Slot* s = mine + (step % depth);
        const u64 want = ((u64)gen << 32) | (u64)(step + 1);
        if (threadIdx.x == 0) {
            unsigned ns = 64;
            while (load_acquire(&s->tag) != want) {
                __nanosleep(ns);
                if (ns < 8192) ns *= 2;
            }
            s_src = load_acquire(&s->src);
            s_dst = load_acquire(&s->dst);
            s_count = load_acquire(&s->count);
            s_op = load_acquire(&s->op);
        }
        __syncthreads();
        const u64 op = s_op;
        if (op == 0) {
            // The host lays out the slot so that src and dst agree modulo 16.
            const char* src = (const char*)s_src;
            char* dst = (char*)s_dst;
            const u64 n = s_count;
            u64 head = (16 - (s_dst & 15)) & 15;
            if (head > n) head = n;
            for (u64 i = threadIdx.x; i < head; i += blockDim.x) dst[i] = __ldcv(src + i);
            if (((s_src ^ s_dst) & 15) == 0) {
                const u64 body = (n - head) / 16;
                const uint4* vs = (const uint4*)(src + head);
                uint4* vd = (uint4*)(dst + head);
                for (u64 i = threadIdx.x; i < body; i += blockDim.x) vd[i] = __ldcv(vs + i);
                for (u64 i = head + body * 16 + threadIdx.x; i < n; i += blockDim.x)
                    dst[i] = __ldcv(src + i);
            } else {
                for (u64 i = head + threadIdx.x; i < n; i += blockDim.x) dst[i] = __ldcv(src + i);
            }
            // Every thread's stores reach the system before the host sees done.
            __threadfence_system();
        }
        __syncthreads();
        if (threadIdx.x == 0) store_release(&s->done, want);
        if (op != 0) return;
    }
}
