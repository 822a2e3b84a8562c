/* A complete JIT in C, registered with jit_interface.h: the README's "Use from C" program.
 *
 * It writes one x86-64 function at run time, `answer`, which calls back into the program
 * (`answer_probe`) and returns 42, describes it (name, line rows, frame-pointer frame, its
 * source text) and registers it, then calls it. Under GDB:
 *
 *   gdb -ex 'break answer_probe' -ex run -ex bt ./answer_jit
 *   #0  answer_probe () at examples/c/answer_jit.c:...
 *   #1  0x... in answer () at answer.js:2
 *   #2  0x... in main () at examples/c/answer_jit.c:...
 *
 * Build it as README.md says (static or shared libjit_interface), or `cargo build`: the
 * jit-gdb package's build.rs compiles this file, warnings as errors, into the
 * `c_answer_jit` example (`cargo run --example c_answer_jit -- elf|compact`).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "jit_interface.h"

static const char SOURCE[] = "function answer() {\n"
                             "  probe();\n"
                             "  return 42;\n"
                             "}\n";

/* The native function the JIT code calls: a place for a breakpoint. */
__attribute__((noinline)) void answer_probe(void) {
    __asm__ volatile("" ::: "memory");
}

/* Writes `answer` at `at`; returns its size. The comments give each instruction's offset:
 * the line rows and the frame description below refer to them. */
static uint32_t emit_answer(uint8_t *at) {
    uint8_t *p = at;
    uint64_t probe = (uint64_t)(uintptr_t)&answer_probe;
    *p++ = 0x55;                                  /*  0: push rbp          */
    memcpy(p, "\x48\x89\xe5", 3), p += 3;         /*  1: mov rbp, rsp      */
    memcpy(p, "\x48\xb8", 2), p += 2;             /*  4: mov rax, probe    */
    memcpy(p, &probe, 8), p += 8;
    memcpy(p, "\xff\xd0", 2), p += 2;             /* 14: call rax          */
    memcpy(p, "\xb8\x2a\x00\x00\x00", 5), p += 5; /* 16: mov eax, 42      */
    *p++ = 0x5d;                                  /* 21: pop rbp           */
    *p++ = 0xc3;                                  /* 22: ret               */
    return (uint32_t)(p - at);
}

static int fail(const char *what) {
    fprintf(stderr, "answer_jit: %s: %s\n", what, jit_last_error());
    return 1;
}

int main(int argc, char **argv) {
    jit_format format = JIT_FORMAT_ELF;
    if (argc > 1 && strcmp(argv[1], "compact") == 0) {
        format = JIT_FORMAT_COMPACT;
    } else if (argc > 1 && strcmp(argv[1], "elf") != 0) {
        fprintf(stderr, "usage: %s [elf|compact]\n", argv[0]);
        return 2;
    }
    uint8_t *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED) {
        perror("answer_jit: mmap");
        return 1;
    }
    uint32_t size = emit_answer(code);
    if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0) {
        perror("answer_jit: mprotect");
        return 1;
    }

    jit_object *obj = jit_object_new();
    int32_t f = jit_object_add_function(obj, "answer", (uint64_t)(uintptr_t)code, size);
    if (f < 0) {
        return fail("jit_object_add_function");
    }
    /* Line 1 for the prologue, 2 for the call, 3 for the return value, 4 for the epilogue. */
    const jit_line rows[] = {{0, 1}, {4, 2}, {16, 3}, {21, 4}};
    if (jit_object_set_lines(obj, f, "answer.js", rows, 4) != 0) {
        return fail("jit_object_set_lines");
    }
    /* rbp pushed by offset 1, frame set up by 4; the epilogue restores rbp by 22, returns
     * by 23. */
    if (jit_object_set_frame_pointer(obj, f, 1, 4) != 0 ||
        jit_object_add_epilogue(obj, f, 22, 23) != 0) {
        return fail("frame description");
    }
    /* answer.js exists nowhere on disk: GDB lists these lines from the registered text. */
    if (jit_object_set_source(obj, "answer.js", SOURCE, sizeof SOURCE - 1) != 0) {
        return fail("jit_object_set_source");
    }
    jit_registration *reg = jit_register(obj, format); /* consumes obj */
    if (reg == NULL) {
        return fail("jit_register");
    }

    int (*answer)(void) = (int (*)(void))(uintptr_t)code;
    int result = answer();
    printf("answer() = %d\n", result);

    jit_unregister(reg);
    munmap(code, 4096);
    return result == 42 ? 0 : 1;
}
