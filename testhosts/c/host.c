/* jit-gdb C test host: the Rust host's scenario (testhosts/src/scenario.rs) through the C API.
 *
 * It JIT-compiles real x86-64 code at run time (hand-encoded bytes in an mmap'ed buffer,
 * written read-write, then switched to read-execute), describes it with jit_interface.h and
 * runs it:
 *   main -> run_jit -> jit_entry -> jit_middle(n) -> jit_frameless -> jit_test_callback
 *        -> jit_second -> jit_test_break_here
 * usage: host [--format elf|compact|none] [--source-dir DIR] run|wait|crash|unregister|layout
 * (same modes and output lines as jit-gdb-testhost --help describes).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "jit_interface.h"

#define BASE_ADDRESS 0x1a1700000000ULL
#define CODE_SIZE 4096
#define ENTRY_N 40
static long value = 100;

/* ---- a tiny x86-64 emitter: one call per instruction, boundaries recorded ---- */

struct jit_fn {
    const char *name;
    uint32_t offset; /* in the code buffer */
    uint8_t code[64];
    uint32_t len;
    uint32_t insns[16];
    int ninsns;
    jit_line lines[8];
    int nlines;
    int frame_pointer; /* 1: push_end/setup_end/restore_end/ret_end; 0: rows */
    uint32_t push_end, setup_end, restore_end, ret_end;
    jit_unwind_row rows[4];
    int nrows;
    /* Its one call: return offset, callee entry, callee symbol name (NULL: a JIT function). */
    uint32_t call_end;
    uint64_t call_target;
    const char *call_name;
};

/* Records the call instruction just emitted. */
static void called(struct jit_fn *f, uint64_t target, const char *name) {
    f->call_end = f->len;
    f->call_target = target;
    f->call_name = name;
}

static void insn(struct jit_fn *f, const uint8_t *bytes, size_t n) {
    f->insns[f->ninsns++] = f->len;
    memcpy(f->code + f->len, bytes, n);
    f->len += (uint32_t)n;
}
#define I(f, ...) insn((f), (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__}))

static void line(struct jit_fn *f, uint32_t l) {
    f->lines[f->nlines].offset = f->len;
    f->lines[f->nlines].line = l;
    f->nlines++;
}

/* mov rax, imm64 */
static void mov_rax_imm64(struct jit_fn *f, uint64_t v) {
    uint8_t b[10] = {0x48, 0xb8};
    memcpy(b + 2, &v, 8);
    insn(f, b, sizeof b);
}

/* call rel32 to `target`, this function being placed at `here` */
static void call_rel(struct jit_fn *f, uint64_t here, uint64_t target) {
    int32_t rel = (int32_t)(int64_t)(target - (here + f->len + 5));
    uint8_t b[5] = {0xe8};
    memcpy(b + 1, &rel, 4);
    insn(f, b, sizeof b);
}

static void prologue(struct jit_fn *f) {
    f->frame_pointer = 1;
    I(f, 0x55); /* push rbp */
    f->push_end = f->len;
    I(f, 0x48, 0x89, 0xe5); /* mov rbp, rsp */
    f->setup_end = f->len;
}

/* `patch_nop`: a nop between `pop rbp` and `ret` (a patch point), which GDB's built-in
 * epilogue heuristic (a `ret` at the pc) does not cover: only our description unwinds it. */
static void epilogue(struct jit_fn *f, int patch_nop) {
    I(f, 0x5d); /* pop rbp */
    f->restore_end = f->len;
    if (patch_nop)
        I(f, 0x90); /* nop */
    I(f, 0xc3); /* ret */
    f->ret_end = f->len;
}

static void sp_row(struct jit_fn *f, uint32_t offset, int32_t cfa_offset) {
    jit_unwind_row r = {offset, JIT_CFA_SP, cfa_offset, 0};
    f->rows[f->nrows++] = r;
}

/* ---- native functions the JIT code calls ---- */

typedef long (*jit_fn_ptr)(long, const long *);
static jit_fn_ptr second_fn;
static int wait_in_break;

__attribute__((noinline, used)) long jit_test_break_here(long n) {
    __asm__ volatile("" ::: "memory");
    if (wait_in_break) {
        printf("jit-gdb-c-host: ready pid=%d\n", (int)getpid());
        fflush(stdout);
        for (;;)
            pause();
    }
    return n * 2;
}

__attribute__((noinline, used)) long jit_test_callback(long t, const long *p) {
    long r = second_fn(t + 1, p);
    __asm__ volatile("" ::: "memory");
    return r;
}

__attribute__((noinline, used)) long run_jit(jit_fn_ptr entry, long n, const long *p) {
    long r = entry(n, p);
    __asm__ volatile("" ::: "memory");
    return r;
}

static long expected_result(long n, long v) {
    long t = n + 1;
    return 2 * (t + 1 + v) + t + n + 1;
}

/* ---- the scenario (same code and lines as the Rust host) ---- */

static const char SOURCE[] =
    "// jit-gdb test host: the pseudo source its JIT compiles to x86-64\n"
    "function jit_entry(n, p) {\n"
    "  return jit_middle(n, p) + 1;\n"
    "}\n"
    "\n"
    "function jit_middle(n, p) {\n"
    "  let m = n + 1;\n"
    "  return jit_frameless(m, p) + n;\n"
    "}\n"
    "\n"
    "function jit_frameless(t, p) {   // no frame pointer: SP-based unwind rows\n"
    "  let saved = t;\n"
    "  return jit_test_callback(t, p) + saved;\n"
    "}\n"
    "\n"
    "function jit_second(n, p) {\n"
    "  n = n + *p;\n"
    "  return jit_test_break_here(n);\n"
    "}\n";

static uint32_t align16(uint32_t x) { return (x + 15) & ~15u; }

/* Fills fns[0..4) in call order: entry, middle, frameless, second. */
static void compile(uint64_t base, struct jit_fn fns[4]) {
    struct jit_fn *entry = &fns[0], *middle = &fns[1], *frameless = &fns[2], *second = &fns[3];
    memset(fns, 0, 4 * sizeof *fns);
    uint32_t next = 0;

    second->name = "jit_second";
    line(second, 16);
    prologue(second);
    line(second, 17);
    I(second, 0x48, 0x03, 0x7e, 0x00); /* add rdi, [rsi+0] */
    line(second, 18);
    mov_rax_imm64(second, (uint64_t)(uintptr_t)&jit_test_break_here);
    I(second, 0xff, 0xd0); /* call rax */
    called(second, (uint64_t)(uintptr_t)&jit_test_break_here, "jit_test_break_here");
    line(second, 19);
    epilogue(second, 0);
    second->offset = next;
    next = align16(next + second->len);

    frameless->name = "jit_frameless";
    line(frameless, 11);
    sp_row(frameless, 0, 8);
    I(frameless, 0x48, 0x83, 0xec, 24); /* sub rsp, 24 */
    sp_row(frameless, frameless->len, 32);
    line(frameless, 12);
    I(frameless, 0x48, 0x89, 0x7c, 0x24, 8); /* mov [rsp+8], rdi */
    line(frameless, 13);
    mov_rax_imm64(frameless, (uint64_t)(uintptr_t)&jit_test_callback);
    I(frameless, 0xff, 0xd0);                 /* call rax */
    called(frameless, (uint64_t)(uintptr_t)&jit_test_callback, "jit_test_callback");
    I(frameless, 0x48, 0x03, 0x44, 0x24, 8);  /* add rax, [rsp+8] */
    line(frameless, 14);
    I(frameless, 0x48, 0x83, 0xc4, 24); /* add rsp, 24 */
    sp_row(frameless, frameless->len, 8);
    I(frameless, 0xc3); /* ret */
    frameless->offset = next;
    next = align16(next + frameless->len);

    middle->name = "jit_middle";
    middle->offset = next;
    line(middle, 6);
    prologue(middle);
    I(middle, 0x48, 0x83, 0xec, 16);   /* sub rsp, 16 */
    I(middle, 0x48, 0x89, 0x7d, 0xf8); /* mov [rbp-8], rdi */
    line(middle, 7);
    I(middle, 0x48, 0x83, 0xc7, 1); /* add rdi, 1 */
    line(middle, 8);
    call_rel(middle, base + middle->offset, base + frameless->offset);
    called(middle, base + frameless->offset, NULL);
    I(middle, 0x48, 0x03, 0x45, 0xf8); /* add rax, [rbp-8] */
    line(middle, 9);
    I(middle, 0x48, 0x83, 0xc4, 16); /* add rsp, 16 */
    epilogue(middle, 1);
    next = align16(next + middle->len);

    entry->name = "jit_entry";
    entry->offset = next;
    line(entry, 2);
    prologue(entry);
    line(entry, 3);
    call_rel(entry, base + entry->offset, base + middle->offset);
    called(entry, base + middle->offset, NULL);
    I(entry, 0x48, 0x83, 0xc0, 1); /* add rax, 1 */
    line(entry, 4);
    epilogue(entry, 0);
}

static void die(const char *what) {
    fprintf(stderr, "jit-gdb-c-host: %s: %s\n", what, jit_last_error());
    exit(1);
}

static jit_registration *register_all(uint64_t base, struct jit_fn fns[4], const char *file,
                                      jit_format format) {
    jit_object *obj = jit_object_new();
    if (!obj)
        die("jit_object_new");
    for (int i = 0; i < 4; i++) {
        struct jit_fn *f = &fns[i];
        int32_t id = jit_object_add_function(obj, f->name, base + f->offset, f->len);
        if (id < 0)
            die(f->name);
        if (jit_object_set_lines(obj, id, file, f->lines, (size_t)f->nlines) != 0)
            die("jit_object_set_lines");
        if (f->frame_pointer) {
            if (jit_object_set_frame_pointer(obj, id, f->push_end, f->setup_end) != 0 ||
                jit_object_add_epilogue(obj, id, f->restore_end, f->ret_end) != 0)
                die("frame pointer description");
        } else if (jit_object_set_unwind(obj, id, f->rows, (size_t)f->nrows) != 0) {
            die("jit_object_set_unwind");
        }
        /* Compact payloads leave call sites out; ELF ones let GDB match each frame to its
         * caller's call without a failed search. */
        if (jit_object_add_call_site(obj, id, f->call_end, f->call_target, f->call_name, 0) != 0)
            die("jit_object_add_call_site");
        /* jit_middle keeps n at [rbp-8]: declared for `info args` (ELF payloads only). */
        if (format == JIT_FORMAT_ELF && strcmp(f->name, "jit_middle") == 0 &&
            jit_object_add_variable(obj, id, "n", JIT_VAR_PARAMETER, JIT_TYPE_I64,
                                    JIT_LOC_FRAME_OFFSET, -8) != 0)
            die("jit_object_add_variable");
    }
    jit_registration *reg = jit_register(obj, format);
    if (!reg)
        die("jit_register");
    return reg;
}

int main(int argc, char **argv) {
    const char *mode = NULL, *dir = ".";
    int format = JIT_FORMAT_ELF; /* -1: none */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--format") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            format = strcmp(v, "elf") == 0       ? JIT_FORMAT_ELF
                     : strcmp(v, "compact") == 0 ? JIT_FORMAT_COMPACT
                     : strcmp(v, "none") == 0    ? -1
                                                 : -2;
            if (format == -2) {
                fprintf(stderr, "jit-gdb-c-host: unknown format `%s`\n", v);
                return 2;
            }
        } else if (strcmp(argv[i], "--source-dir") == 0 && i + 1 < argc) {
            dir = argv[++i];
        } else if (!mode && argv[i][0] != '-') {
            mode = argv[i];
        } else {
            fprintf(stderr, "usage: %s [--format elf|compact|none] [--source-dir DIR] "
                            "run|wait|crash|unregister|layout\n", argv[0]);
            return 2;
        }
    }
    if (!mode) {
        fprintf(stderr, "jit-gdb-c-host: no mode given (run|wait|crash|unregister|layout)\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    char abs_dir[PATH_MAX], file[PATH_MAX + 32];
    if (!realpath(dir, abs_dir)) {
        perror(dir);
        return 1;
    }
    snprintf(file, sizeof file, "%s/jit_scenario.jit", abs_dir);
    FILE *src = fopen(file, "w");
    if (!src || fputs(SOURCE, src) < 0 || fclose(src) != 0) {
        perror(file);
        return 1;
    }

    /* A fixed address (if free) so the tests know the code addresses in advance. */
    uint8_t *code = mmap((void *)BASE_ADDRESS, CODE_SIZE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (code == MAP_FAILED)
        code = mmap(NULL, CODE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    uint64_t base = (uint64_t)(uintptr_t)code;
    struct jit_fn fns[4];
    compile(base, fns);
    for (int i = 0; i < 4; i++) {
        struct jit_fn *f = &fns[i];
        memcpy(code + f->offset, f->code, f->len);
        printf("jit-fn name=%s start=%#llx size=%u frame=%s insns=", f->name,
               (unsigned long long)(base + f->offset), f->len, f->frame_pointer ? "fp" : "rows");
        for (int k = 0; k < f->ninsns; k++)
            printf("%s%u", k ? "," : "", f->insns[k]);
        printf(" lines=");
        for (int k = 0; k < f->nlines; k++)
            printf("%s%u:%u", k ? "," : "", f->lines[k].offset, f->lines[k].line);
        printf(" file=%s\n", file);
    }
    if (mprotect(code, CODE_SIZE, PROT_READ | PROT_EXEC) != 0) {
        perror("mprotect");
        return 1;
    }
    if (strcmp(mode, "layout") == 0)
        return 0;

    jit_fn_ptr entry = (jit_fn_ptr)(uintptr_t)(base + fns[0].offset);
    second_fn = (jit_fn_ptr)(uintptr_t)(base + fns[3].offset);
    jit_registration *reg = NULL;
    if (format >= 0) {
        reg = register_all(base, fns, file, (jit_format)format);
        printf("jit-gdb-c-host: registered 4 functions as %s in 1 object(s)\n",
               format == JIT_FORMAT_ELF ? "ELF" : "compact records");
    }
    long want = expected_result(ENTRY_N, value), got;
    if (strcmp(mode, "run") == 0 || strcmp(mode, "unregister") == 0) {
        got = run_jit(entry, ENTRY_N, &value);
        printf("jit-gdb-c-host: result=%ld expected=%ld\n", got, want);
        if (got != want)
            return 1;
        if (strcmp(mode, "unregister") == 0) {
            jit_unregister(reg);
            reg = NULL;
            printf("jit-gdb-c-host: unregistered\n");
            jit_test_break_here(-1);
            got = run_jit(entry, ENTRY_N, &value);
            printf("jit-gdb-c-host: result=%ld expected=%ld\n", got, want);
        }
    } else if (strcmp(mode, "wait") == 0) {
        wait_in_break = 1;
        run_jit(entry, ENTRY_N, &value);
    } else if (strcmp(mode, "crash") == 0) {
        run_jit(entry, ENTRY_N, NULL);
        fprintf(stderr, "jit-gdb-c-host: the JIT code did not crash\n");
        return 1;
    } else {
        fprintf(stderr, "jit-gdb-c-host: unknown mode `%s`\n", mode);
        return 2;
    }
    jit_unregister(reg);
    munmap(code, CODE_SIZE);
    return 0;
}
