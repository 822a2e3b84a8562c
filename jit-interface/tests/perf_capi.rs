//! The perf outputs from C: a program linked against the static library switches them on
//! with the C API, registers real machine code and returns from `main` without flushing;
//! the exit hook must write everything.

mod perf_support;

use std::path::Path;
use std::process::Command;

use perf_support::*;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include "jit_interface.h"

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    /* An explicit call that fails reports through jit_last_error. */
    if (jit_dump_enable("/nonexistent-jit-dump-dir") != -1) return 10;
    printf("dump-error %s\n", jit_last_error());
    if (jit_perf_map_enable() != 0) { printf("error %s\n", jit_last_error()); return 11; }
    if (jit_dump_enable(argv[1]) != 0) { printf("error %s\n", jit_last_error()); return 12; }

    /* push rbp; mov rbp,rsp; xor eax,eax; pop rbp; ret */
    static const unsigned char fn[] = {0x55, 0x48, 0x89, 0xe5, 0x31, 0xc0, 0x5d, 0xc3};
    unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED) return 13;
    memcpy(code, fn, sizeof fn);
    if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0) return 14;

    jit_object *obj = jit_object_new();
    int f = jit_object_add_function(obj, "c_jit_zero", (uint64_t)(uintptr_t)code, sizeof fn);
    jit_line rows[] = {{0, 10}, {4, 11}, {6, 12}};
    if (f < 0 || jit_object_set_lines(obj, f, "zero.c", rows, 3) != 0
        || jit_object_set_frame_pointer(obj, f, 1, 4) != 0
        || jit_object_add_epilogue(obj, f, 7, 8) != 0) {
        printf("error %s\n", jit_last_error());
        return 15;
    }
    jit_registration *reg = jit_register(obj, JIT_FORMAT_COMPACT);
    if (!reg) { printf("error %s\n", jit_last_error()); return 16; }
    int (*zero)(void) = (int (*)(void))(uintptr_t)code;
    printf("pid %d\nfunction c_jit_zero %p %zu\nresult %d\n", (int)getpid(), (void *)code,
           sizeof fn, zero());
    if (jit_perf_error() != NULL) { printf("perf-error %s\n", jit_perf_error()); return 17; }
    jit_unregister(reg);
    return 0; /* no jit_perf_flush: the exit hook writes the buffers */
}
"#;

fn compile(dir: &Path) -> std::path::PathBuf {
    build_artifacts();
    let lib = profile_dir().join("libjit_interface.a");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    std::fs::write(dir.join("prog.c"), PROGRAM).unwrap();
    let exe = dir.join("prog");
    let out = Command::new("cc")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(&include)
        .arg(dir.join("prog.c"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-lgcc_s", "-o"])
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn c_program_returning_from_main_gets_both_outputs_written() {
    let dir = scratch("capi");
    let exe = compile(&dir);
    let out = Command::new(&exe)
        .arg(&dir)
        .env_remove("JIT_DUMP")
        .env_remove("JIT_PERF_MAP")
        .output()
        .expect("run C program");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("result 0"), "{stdout}");
    assert!(
        stdout.contains("dump-error jitdump: directory /nonexistent-jit-dump-dir is not usable"),
        "{stdout}"
    );
    let host = HostReport::parse(&stdout);
    let f = host.function("c_jit_zero");

    let map_path = format!("/tmp/perf-{}.map", host.pid);
    let map = std::fs::read_to_string(&map_path).expect("perf map written at exit");
    assert_eq!(map, format!("{:x} 8 c_jit_zero\n", f.start));
    let _ = std::fs::remove_file(&map_path);

    let dump = std::fs::read(dir.join(format!("jit-{}.dump", host.pid))).expect("dump");
    let mut ids = Vec::new();
    let mut at = 40;
    while at < dump.len() {
        ids.push(u32::from_le_bytes(dump[at..at + 4].try_into().unwrap()));
        at += u32::from_le_bytes(dump[at + 4..at + 8].try_into().unwrap()) as usize;
    }
    // DEBUG_INFO, UNWINDING_INFO, CODE_LOAD, then CLOSE from the exit hook.
    assert_eq!(ids, [2, 4, 0, 3], "record types in the dump");
    let tail = &dump[dump.len() - 16 - 8 - "c_jit_zero\0".len()..dump.len() - 16];
    assert_eq!(&tail[..11], b"c_jit_zero\0");
    assert_eq!(
        &tail[11..],
        &[0x55, 0x48, 0x89, 0xe5, 0x31, 0xc0, 0x5d, 0xc3]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
