//! The files `jit-gdb inspect` reads: it maps the core and reads only what it needs (a real
//! gcore grown to 16 GiB of sparse memory lists the same functions in bounded memory),
//! refuses devices, bounds pipes, and names a truncated core; and it finds the descriptor in
//! the program's shared libraries when the program does not define it.

mod common;

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn jit_gdb() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_jit-gdb"))
}

fn text(o: &Output) -> String {
    format!(
        "--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// What a run of `jit-gdb` cost: its peak resident memory (the kernel's `ru_maxrss` for this
/// one child, from `wait4`) and its wall time.
struct Cost {
    max_rss_kib: u64,
    wall: Duration,
}

/// Runs `jit-gdb ARGS` and measures it.
// Reaped by `wait4` (for its rusage), not by `Child::wait`.
#[allow(clippy::zombie_processes)]
fn run_measured(args: &[&std::ffi::OsStr]) -> (Output, Cost) {
    let start = Instant::now();
    let mut child = Command::new(jit_gdb())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run jit-gdb");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t = std::thread::spawn(move || {
        let mut v = Vec::new();
        err.read_to_end(&mut v).unwrap();
        v
    });
    let mut stdout = Vec::new();
    out.read_to_end(&mut stdout).unwrap();
    let stderr = t.join().unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter for wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, which `Child` has not reaped (it is never waited).
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(
        pid,
        child.id() as i32,
        "wait4: {}",
        std::io::Error::last_os_error()
    );
    let wall = start.elapsed();
    assert!(
        libc::WIFEXITED(status),
        "jit-gdb died (wait status {status:#x})\n{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    use std::os::unix::process::ExitStatusExt;
    let out = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout,
        stderr,
    };
    let cost = Cost {
        max_rss_kib: usage.ru_maxrss as u64,
        wall,
    };
    (out, cost)
}

/// `jit-gdb inspect CORE --exe EXE --list`, measured.
fn list(core: &Path, exe: &Path) -> (Output, Cost) {
    run_measured(&[
        "inspect".as_ref(),
        core.as_os_str(),
        "--exe".as_ref(),
        exe.as_os_str(),
        "--list".as_ref(),
    ])
}

/// The function lines of `--list` (`  0xSTART SIZE NAME FILE`), sorted.
fn functions(stdout: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| l.starts_with("  0x"))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// A `gcore` of `program ARGS wait`, taken by GDB attached to it.
fn gcore(program: &Path, args: &[&str], dir: &Path) -> PathBuf {
    let waiting = WaitingHost::start(program, args, dir);
    let core = dir.join("gcore.core");
    let t = Gdb::attach(waiting.pid, dir)
        .section("gcore", [format!("gcore {}", core.display())])
        .cmd("detach")
        .run();
    drop(waiting);
    if !core.exists() {
        t.fail("gcore wrote no core file");
    }
    core
}

const GIB: u64 = 1 << 30;

/// Writes `big`: the core `small` with one more PT_LOAD of `extra` bytes of memory, all of
/// them in the file (p_filesz = p_memsz) but never written, so the file is sparse. The new
/// program header table goes after the old file, the new segment after it, page-aligned,
/// and the file ends with the segment: cutting the file short cuts only that segment.
/// Returns the segment's file offset.
fn grow_sparse(small: &Path, big: &Path, extra: u64) -> u64 {
    use object::read::elf::{FileHeader, ProgramHeader};
    let bytes = std::fs::read(small).unwrap();
    let h = object::elf::FileHeader64::<object::Endianness>::parse(&*bytes).unwrap();
    let e = h.endian().unwrap();
    let phdrs = h.program_headers(e, &*bytes).unwrap();
    let top = phdrs
        .iter()
        .map(|p| p.p_vaddr(e) + p.p_memsz(e))
        .max()
        .unwrap();
    // Above every mapping of the process, page-aligned.
    let vaddr = (top + 0xfff) & !0xfff;
    let phentsize = 56u64;
    let table_at = (bytes.len() as u64 + 7) & !7;
    let count = phdrs.len() as u64 + 1;
    let seg_at = (table_at + count * phentsize + 0xfff) & !0xfff;
    let mut table = Vec::new();
    for p in phdrs {
        table.extend_from_slice(object::bytes_of(p));
    }
    let mut ph = [0u8; 56];
    ph[0..4].copy_from_slice(&object::elf::PT_LOAD.0.to_le_bytes());
    ph[4..8].copy_from_slice(&(object::elf::PF_R | object::elf::PF_W).0.to_le_bytes());
    ph[8..16].copy_from_slice(&seg_at.to_le_bytes()); // p_offset
    ph[16..24].copy_from_slice(&vaddr.to_le_bytes()); // p_vaddr
    ph[32..40].copy_from_slice(&extra.to_le_bytes()); // p_filesz
    ph[40..48].copy_from_slice(&extra.to_le_bytes()); // p_memsz
    ph[48..56].copy_from_slice(&0x1000u64.to_le_bytes()); // p_align
    table.extend_from_slice(&ph);
    let mut out = bytes.clone();
    // e_phoff (offset 32) and e_phnum (offset 56) of the ELF64 header.
    out[32..40].copy_from_slice(&table_at.to_le_bytes());
    out[56..58].copy_from_slice(&(count as u16).to_le_bytes());
    out.resize(table_at as usize, 0);
    out.extend_from_slice(&table);
    let mut f = std::fs::File::create(big).unwrap();
    f.write_all(&out).unwrap();
    // The segment's last page written, the rest a hole: the file is `extra` bytes longer
    // and uses a few pages of disk.
    f.seek(SeekFrom::Start(seg_at + extra - 4096)).unwrap();
    f.write_all(&[0x5a; 4096]).unwrap();
    seg_at
}

/// Disk blocks a file uses, in KiB (to check the big core is really sparse).
fn disk_kib(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().blocks() / 2
}

#[test]
fn sparse_16_gib_core_is_read_in_bounded_memory() {
    if !require_tool("gdb", "sparse_16_gib_core_is_read_in_bounded_memory") {
        return;
    }
    let dir = TempDir::new("inspect-sparse");
    let exe = testhost();
    let core = gcore(&exe, &["--format", "elf"], dir.path());
    let (small, small_cost) = list(&core, &exe);
    assert_eq!(small.status.code(), Some(0), "{}", text(&small));
    let want = functions(&small.stdout);
    assert_eq!(want.len(), 4, "{}", text(&small));

    // The same core through a FIFO (not mappable: read into memory) lists the same.
    if have_tool("mkfifo") {
        let fifo = dir.join("piped.core");
        assert!(Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let writer = {
            let (fifo, core) = (fifo.clone(), core.clone());
            std::thread::spawn(move || {
                let mut f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
                f.write_all(&std::fs::read(core).unwrap()).unwrap();
            })
        };
        let (piped, _) = list(&fifo, &exe);
        writer.join().unwrap();
        assert_eq!(piped.status.code(), Some(0), "{}", text(&piped));
        assert_eq!(functions(&piped.stdout), want, "{}", text(&piped));
    }

    let big = dir.join("sparse.core");
    let seg_at = grow_sparse(&core, &big, 16 * GIB);
    let len = std::fs::metadata(&big).unwrap().len();
    assert!(len > 16 * GIB, "{len}");
    if disk_kib(&big) > 64 << 10 {
        // A file system without holes would need 16 GiB of disk: not this test's business.
        eprintln!("skipping: {} does not keep holes", dir.path().display());
        return;
    }
    let (out, cost) = list(&big, &exe);
    eprintln!(
        "inspect --list: {} bytes core: max RSS {} KiB, {:?}; 16 GiB sparse core: max RSS {} KiB, {:?}",
        std::fs::metadata(&core).unwrap().len(),
        small_cost.max_rss_kib,
        small_cost.wall,
        cost.max_rss_kib,
        cost.wall
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(functions(&out.stdout), want, "{}", text(&out));
    assert!(
        cost.max_rss_kib < 100 << 10,
        "a 16 GiB sparse core took {} KiB of memory",
        cost.max_rss_kib
    );

    // The same core cut in the middle of the huge segment: the JIT list (in the old part)
    // is read whole, and the cut is named.
    let f = std::fs::OpenOptions::new().write(true).open(&big).unwrap();
    f.set_len(seg_at + 8 * GIB).unwrap();
    drop(f);
    let (out, cost) = list(&big, &exe);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(functions(&out.stdout), want, "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "problem: the core file is truncated: its segments need {} bytes, it has {}",
            seg_at + 16 * GIB,
            seg_at + 8 * GIB
        )),
        "{}",
        text(&out)
    );
    assert!(cost.max_rss_kib < 100 << 10, "{} KiB", cost.max_rss_kib);
}

/// Devices and directories are refused by name; a pipe is read, at most 256 MiB of it.
#[test]
fn special_files_are_refused_or_bounded() {
    let exe = testhost();
    for (path, kind) in [
        ("/dev/zero", "a character device"),
        ("/dev/null", "a character device"),
        ("/", "a directory"),
    ] {
        let (out, cost) = list(Path::new(path), &exe);
        assert_eq!(out.status.code(), Some(1), "{path}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("cannot read the core file {path}: it is {kind}")),
            "{path}: {err}"
        );
        assert!(
            cost.max_rss_kib < 100 << 10,
            "{path}: {} KiB",
            cost.max_rss_kib
        );
        // As the program too.
        let (out, _) = run_measured(&[
            "inspect".as_ref(),
            "/no/core".as_ref(),
            "--exe".as_ref(),
            path.as_ref(),
        ]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    }
    let (out, _) = run_measured(&[
        "inspect".as_ref(),
        exe.as_os_str(),
        "--exe".as_ref(),
        "/dev/zero".as_ref(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read the program /dev/zero: it is a character device"),
        "{err}"
    );

    // A FIFO that never ends: bounded, with the reason.
    if !require_tool("mkfifo", "special_files_are_refused_or_bounded (FIFO part)") {
        return;
    }
    let dir = TempDir::new("inspect-fifo");
    let fifo = dir.join("endless.core");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            let zeros = vec![0u8; 1 << 20];
            // Until the reader gives up (EPIPE: Rust ignores SIGPIPE).
            let mut written = 0u64;
            while f.write_all(&zeros).is_ok() {
                written += zeros.len() as u64;
            }
            written
        })
    };
    let (out, cost) = list(&fifo, &exe);
    let written = writer.join().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("it is a pipe or socket with more than 256 MiB"),
        "{err}"
    );
    eprintln!(
        "endless FIFO: read {written} bytes, max RSS {} KiB",
        cost.max_rss_kib
    );
    assert!(written < 300 << 20, "{written} bytes read from the pipe");
    assert!(cost.max_rss_kib < 400 << 10, "{} KiB", cost.max_rss_kib);
}

// ---------------------------------------------------------------------------------------
// The descriptor in a shared library

/// File offset of the core's byte for memory address `addr` (its PT_LOAD segments, read
/// here with `object`, independently of the inspector).
fn file_offset(core: &[u8], addr: u64) -> usize {
    use object::read::elf::{FileHeader, ProgramHeader};
    let h = object::elf::FileHeader64::<object::Endianness>::parse(core).unwrap();
    let e = h.endian().unwrap();
    for ph in h.program_headers(e, core).unwrap() {
        let (v, f, o) = (ph.p_vaddr(e), ph.p_filesz(e), ph.p_offset(e));
        if ph.p_type(e) == object::elf::PT_LOAD && addr >= v && addr < v + f {
            return (o + (addr - v)) as usize;
        }
    }
    panic!("{addr:#x} is not in the core's file");
}

/// Runs `cc ARGS` in `dir`.
fn cc(dir: &Path, args: &[&str]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    assert!(
        out.status.success(),
        "{cc} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The JIT functions `host` registers (its `layout` mode), as `--list` prints them.
fn layout_lines(host: &Path, args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = Layout::of(host, args)
        .functions
        .iter()
        .map(|f| format!("  {:#018x} {:>6} {} {}", f.start, f.size, f.name, f.file))
        .collect();
    v.sort();
    v
}

/// The `descriptor: FILE at ADDR (...)` line of `--list`: (FILE, ADDR).
fn descriptor_line(stdout: &[u8]) -> (String, u64) {
    let s = String::from_utf8_lossy(stdout);
    let line = s
        .lines()
        .find_map(|l| l.strip_prefix("descriptor: "))
        .unwrap_or_else(|| panic!("no descriptor line in\n{s}"));
    let (file, rest) = line.split_once(" at ").unwrap();
    let addr = parse_hex(rest.split_whitespace().next().unwrap()).unwrap();
    (file.to_string(), addr)
}

/// GDB's `info symbol ADDR` on `core` of `program`.
fn gdb_info_symbol(program: &Path, core: &Path, addr: u64, dir: &Path) -> String {
    let t = Gdb::core(program, core, dir)
        .section("sym", [format!("info symbol {addr:#x}")])
        .run();
    t.section("sym").trim().to_string()
}

/// The C host linked with jit-interface as a shared library, so that the program does not
/// define `__jit_debug_descriptor` and its library does (as `lli` and libLLVM): `inspect
/// --exe PROGRAM` finds it in the library through the core's link map, where GDB finds it;
/// through NT_FILE when the link map is damaged; names a missing library; prefers the
/// library whose list has entries when two define the symbol.
#[test]
fn descriptor_in_a_shared_library() {
    let test = "descriptor_in_a_shared_library";
    if !require_tool("gdb", test) || !require_tool("cc", test) {
        return;
    }
    let dir = TempDir::new("inspect-shared");
    let d = dir.path();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // A copy of the library (removed below), next to the programs that load it.
    std::fs::copy(
        testhosts_dir().join("libjit_interface.so"),
        d.join("libjit_interface.so"),
    )
    .unwrap();
    std::fs::write(
        d.join("extra.c"),
        "int jit_gdb_extra(int x) { return x + 1; }\n",
    )
    .unwrap();
    // A library with its own descriptor and hook, in which nothing registers.
    std::fs::write(
        d.join("other.c"),
        "#include <stdint.h>\n\
         struct jit_descriptor { uint32_t version, action_flag; void *relevant, *first; };\n\
         struct jit_descriptor __jit_debug_descriptor = { 1, 0, 0, 0 };\n\
         void __attribute__((noinline)) __jit_debug_register_code(void) {\n\
             __asm__ volatile(\"\" ::: \"memory\");\n\
         }\n",
    )
    .unwrap();
    cc(
        d,
        &["-shared", "-fPIC", "-O2", "extra.c", "-o", "libextra.so"],
    );
    cc(
        d,
        &["-shared", "-fPIC", "-O2", "other.c", "-o", "libother.so"],
    );
    let include = root.join("jit-interface/include");
    let host_c = root.join("testhosts/c/host.c");
    let host = |name: &str, libs: &[&str]| {
        let mut args = vec![
            "-O2",
            "-g",
            "-std=gnu11",
            "-I",
            include.to_str().unwrap(),
            host_c.to_str().unwrap(),
            "-L.",
            // Every library loaded, used or not, in this order.
            "-Wl,--no-as-needed",
        ];
        args.extend(libs);
        // DT_RPATH, not RUNPATH: it wins over the LD_LIBRARY_PATH cargo sets for tests,
        // which holds the workspace's own libjit_interface.so.
        args.extend(["-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN", "-o", name]);
        cc(d, &args);
        d.join(name)
    };
    let shared = host("host-shared", &["-lextra", "-ljit_interface"]);
    let two = host("host-two", &["-lother", "-ljit_interface"]);
    let out = Command::new("nm").arg("-D").arg(&shared).output();
    if let Ok(out) = out {
        let syms = String::from_utf8_lossy(&out.stdout);
        assert!(
            !syms.contains("__jit_debug_descriptor"),
            "the program itself must not define the descriptor:\n{syms}"
        );
    }
    let d_arg = d.to_str().unwrap();
    let args = ["--format", "elf", "--source-dir", d_arg];
    let want = layout_lines(&shared, &args);
    assert_eq!(want.len(), 4);
    let lib = d.join("libjit_interface.so").display().to_string();

    let shared_core = d.join("shared.core");
    std::fs::rename(gcore(&shared, &args, d), &shared_core).unwrap();
    let two_core = d.join("two.core");
    std::fs::rename(gcore(&two, &args, d), &two_core).unwrap();

    // Found through the link map, at the address GDB gives the symbol.
    let (out, _) = list(&shared_core, &shared);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(functions(&out.stdout), want, "{}", text(&out));
    let (file, addr) = descriptor_line(&out.stdout);
    assert_eq!(file, lib, "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("link map l_addr"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "note: {} does not define __jit_debug_descriptor: found in its shared library {lib}",
            shared.display()
        )),
        "{stdout}"
    );
    let gdb = gdb_info_symbol(&shared, &shared_core, addr, d);
    assert!(
        gdb.starts_with("__jit_debug_descriptor in section") && gdb.ends_with(&lib),
        "GDB says {addr:#x} is `{gdb}`"
    );
    // Other actions say it on stderr, their stdout unchanged.
    let (sym, _) = run_measured(&[
        "inspect".as_ref(),
        shared_core.as_os_str(),
        "--exe".as_ref(),
        shared.as_os_str(),
        "--symbolize".as_ref(),
        want[0].split_whitespace().next().unwrap().as_ref(),
    ]);
    assert_eq!(sym.status.code(), Some(0), "{}", text(&sym));
    assert!(String::from_utf8_lossy(&sym.stdout).contains(" jit_second+0x0 "));
    assert!(String::from_utf8_lossy(&sym.stderr).contains(&format!("shared library {lib}")));

    // Two libraries define it: the one with entries is read, the other named.
    let (out, _) = list(&two_core, &two);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(functions(&out.stdout), want, "{}", text(&out));
    let (file, addr) = descriptor_line(&out.stdout);
    assert_eq!(file, lib, "{}", text(&out));
    let other = d.join("libother.so").display().to_string();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!(
            "note: {other} also defines __jit_debug_descriptor"
        )),
        "{}",
        text(&out)
    );
    let gdb = gdb_info_symbol(&two, &two_core, addr, d);
    assert!(gdb.ends_with(&lib), "GDB says {addr:#x} is `{gdb}`");

    // The link map damaged (DT_DEBUG cleared): the library is found by its NT_FILE mapping.
    // The program's own dynamic section, from `info files` (its sections come first, the
    // libraries' say "in LIB"): `&_DYNAMIC` may name a library's, depending on which
    // objfiles have debug info (GDB without the C library's picks libjit_interface.so's).
    let t = Gdb::core(&shared, &shared_core, d)
        .section("dyn", ["info files"])
        .run();
    let dynamic = t
        .section("dyn")
        .lines()
        .map(str::trim)
        .find(|l| l.ends_with(" is .dynamic"))
        .and_then(|l| parse_hex(l.split_whitespace().next()?))
        .unwrap_or_else(|| t.fail("no .dynamic section of the program in `info files`"));
    let mut bytes = std::fs::read(&shared_core).unwrap();
    let at = file_offset(&bytes, dynamic);
    let tags = (0..).map(|i| at + 16 * i);
    let debug = tags
        .take_while(|&o| bytes[o..o + 8] != [0; 8])
        .find(|&o| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) == 21)
        .expect("DT_DEBUG in the core's dynamic section");
    bytes[debug + 8..debug + 16].fill(0);
    let damaged = d.join("no-link-map.core");
    std::fs::write(&damaged, &bytes).unwrap();
    let (out, _) = list(&damaged, &shared);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(functions(&out.stdout), want, "{}", text(&out));
    assert_eq!(
        descriptor_line(&out.stdout),
        (lib.clone(), addr_of(&shared_core, &shared))
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "note: the link map cannot be read (the program's dynamic section has no DT_DEBUG set:"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("NT_FILE mapping"), "{stdout}");

    // A library missing on this machine is named; the search goes on.
    std::fs::remove_file(d.join("libextra.so")).unwrap();
    let (out, _) = list(&shared_core, &shared);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(functions(&out.stdout), want, "{}", text(&out));
    let missing = format!(
        "problem: cannot read the shared library {}: No such file or directory",
        d.join("libextra.so").display()
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&missing),
        "{missing}: {}",
        text(&out)
    );
    // The one that defines it missing: nothing to read, and why.
    std::fs::remove_file(d.join("libjit_interface.so")).unwrap();
    let (out, _) = list(&shared_core, &shared);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("does not define __jit_debug_descriptor")
            && err.contains(&format!("cannot read the shared library {lib}")),
        "{err}"
    );
}

/// The descriptor address `--list` gives for `core` of `program`.
fn addr_of(core: &Path, program: &Path) -> u64 {
    let (out, _) = list(core, program);
    descriptor_line(&out.stdout).1
}

/// LLVM's `lli` (MCJIT) keeps the descriptor in libLLVM, one of its shared libraries:
/// `inspect --exe lli` finds it there, at the address GDB gives the symbol, and lists the
/// JIT-compiled `main` where GDB puts it.
#[test]
fn lli_descriptor_in_libllvm() {
    let test = "lli_descriptor_in_libllvm";
    if !require_tool("gdb", test) || !require_tool("lli", test) {
        return;
    }
    let dir = TempDir::new("inspect-lli");
    let d = dir.path();
    // Prints the ready line WaitingHost waits for, then waits (its argument `wait` unused).
    let ir = d.join("wait.ll");
    std::fs::write(
        &ir,
        r#"@fmt = private constant [14 x i8] c"ready pid=%d\0A\00"
declare i32 @printf(i8*, ...)
declare i32 @getpid()
declare i32 @fflush(i8*)
declare i32 @pause()
define i32 @main() {
entry:
  %pid = call i32 @getpid()
  %f = getelementptr [14 x i8], [14 x i8]* @fmt, i64 0, i64 0
  %r = call i32 (i8*, ...) @printf(i8* %f, i32 %pid)
  %s = call i32 @fflush(i8* null)
  br label %loop
loop:
  %p = call i32 @pause()
  br label %loop
}
"#,
    )
    .unwrap();
    let lli = PathBuf::from("lli");
    let lli_path = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|p| p.join(&lli))
        .find(|p| p.is_file())
        .unwrap();
    let core = gcore(&lli_path, &["-jit-kind=mcjit", ir.to_str().unwrap()], d);
    let (out, cost) = list(&core, &lli_path);
    eprintln!(
        "{}\nlli core of {} bytes: max RSS {} KiB, {:?}",
        text(&out),
        std::fs::metadata(&core).unwrap().len(),
        cost.max_rss_kib,
        cost.wall
    );
    let code = out.status.code();
    assert!(code == Some(0) || code == Some(3), "{}", text(&out));
    let (file, addr) = descriptor_line(&out.stdout);
    assert!(file.contains("libLLVM"), "{}", text(&out));
    let t = Gdb::core(&lli_path, &core, d)
        .section("addr", ["p/x (long)&__jit_debug_descriptor"])
        .section("sym", ["info symbol &__jit_debug_descriptor"])
        .run();
    let gdb_addr = t
        .section("addr")
        .split(" = ")
        .nth(1)
        .and_then(|v| parse_hex(v.trim()));
    assert_eq!(gdb_addr, Some(addr), "{}", text(&out));
    let sym = t.section("sym");
    assert!(sym.trim().ends_with(&file), "GDB: {sym}; inspector: {file}");
    // The JIT-compiled main, where GDB resolves it.
    let main = functions(&out.stdout)
        .into_iter()
        .find(|l| l.split_whitespace().nth(2) == Some("main"))
        .unwrap_or_else(|| panic!("no main listed: {}", text(&out)));
    let start = parse_hex(main.split_whitespace().next().unwrap()).unwrap();
    let t = Gdb::core(&lli_path, &core, d)
        .section("main", [format!("info symbol {start:#x}")])
        .run();
    assert!(
        t.section("main")
            .trim()
            .starts_with("main in section .text"),
        "GDB: {}",
        t.section("main")
    );
}
