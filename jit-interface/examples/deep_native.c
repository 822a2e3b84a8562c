/* Native half of the backtrace-depth benchmark (deep_host.rs): the same call cycle as the
 * host's JIT code, four functions each calling the next with n - 1, so that GDB unwinds
 * native C frames (DWARF CFI, full debug info) as deep as the JIT ones.
 * Built by scripts/bench.sh: cc -O2 -g -shared -fPIC -o libdeep_native.so deep_native.c
 */
typedef long (*stop_fn)(long);

long native_deep_0(long n, stop_fn stop);
long native_deep_1(long n, stop_fn stop);
long native_deep_2(long n, stop_fn stop);
long native_deep_3(long n, stop_fn stop);

/* noinline and the +1 after the call keep every level a real frame (no inlining, no
 * sibling call). */
#define LEVEL(self, next)                                                                  \
    __attribute__((noinline)) long self(long n, stop_fn stop) {                            \
        if (n == 0)                                                                        \
            return stop(0) + 1;                                                            \
        return next(n - 1, stop) + 1;                                                      \
    }

LEVEL(native_deep_0, native_deep_1)
LEVEL(native_deep_1, native_deep_2)
LEVEL(native_deep_2, native_deep_3)
LEVEL(native_deep_3, native_deep_0)
