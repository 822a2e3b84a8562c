/* GDB's JIT interface symbols (see GDB manual, "JIT Interface").
 *
 * Both are weak: if another JIT runtime in the same process (LLVM's GDB listener defines
 * them strongly) is linked in, its definitions win and every runtime appends to one list.
 * GDB finds them by name in the symbol table, so a stripped binary loses them.
 */
#include <stdint.h>

struct jit_code_entry;

struct jit_descriptor {
    uint32_t version;
    uint32_t action_flag;
    struct jit_code_entry *relevant_entry;
    struct jit_code_entry *first_entry;
};

__attribute__((weak, used, visibility("default")))
struct jit_descriptor __jit_debug_descriptor = { 1, 0, 0, 0 };

/* GDB puts a breakpoint here. noinline + the asm barrier keep the call and the function
 * body in place at any optimisation level. */
__attribute__((weak, used, noinline, visibility("default")))
void __jit_debug_register_code(void) {
    __asm__ volatile("" ::: "memory");
}

/* Referenced from Rust so that the linker keeps this object file whenever the crate is used. */
struct jit_descriptor *jit_interface_descriptor_address(void) {
    return &__jit_debug_descriptor;
}
