//! Scale host for benchmarks and `tests/scale_*.rs`: registers many fake functions (names,
//! 8 line rows, a frame-pointer prologue each, no epilogue described; their code is never
//! run, except in `run` mode) through the public API, in objects of K functions.
//!
//! ```text
//! scale_host reg N K compact|elf        register N functions, K per object; print timing
//! scale_host run N K compact|elf        the same with real code, then call functions N-1,
//!                                       N/2 and 0 (their `jit-fn` lines printed first),
//!                                       the last calling scale_host_jit_stop
//! scale_host encode N K compact|elf     build and encode the same objects, register nothing
//! scale_host attach N K compact|elf     the same, then print the pid and sleep
//! scale_host unreg N M compact|elf      register N functions one by one, then unregister
//!                                       M of them spread over the whole set; print timing
//! scale_host tier N EVERY compact|elf   register N functions one by one, unregistering
//!                                       a recent one after every EVERY-th; print timing
//! scale_host drain N compact|elf one|newest|many
//!                                       register N functions one by one, then unregister
//!                                       all, one by one (oldest or newest first) or in
//!                                       one call;
//!                                       print timing
//! scale_host gapfill N compact|elf   code in gaps later, holes reused: see `gapfill`
//! scale_host touch PAGES               write a byte to each of PAGES fresh pages; print
//!                                       the time per page (a page fault each)
//! scale_host churn T OPS compact|elf    T threads each register/unregister OPS times;
//!                                       print every slot's address and the function
//!                                       registered there (or -), stop in
//!                                       scale_host_checkpoint
//! scale_host churn T OPS compact|elf wait
//!                                       the same (queries to ./queries.gdb by default),
//!                                       then print `ready pid=PID` and sleep; once an
//!                                       attached debugger sets SCALE_HOST_GO, unregister
//!                                       every other live object (half of them one by one,
//!                                       half with one `unregister_many`), write ./queries2.gdb,
//!                                       stop in scale_host_checkpoint again and sleep
//! ```
//! `reg` and `run` call `scale_host_code_ready` once the functions' addresses are known, before
//! registering, with `SCALE_HOST_PROBE` set to an address inside the middle function (for a
//! debugger's `break *ADDR`). Timing goes to stderr as `TOTAL <mode> <seconds> s`. `SCALE_HOST_LINES=spread` puts each
//! function's lines at its own place in the source (default: every function has lines 10-17);
//! `SCALE_HOST_FILES=N` puts function `j`'s in file `j % N` of N (default: all in one).
//! `SCALE_HOST_GAP=B` leaves B free bytes after each function, `SCALE_HOST_GAP=random` 0-256
//! (pseudo-random, the same every run), as real runtimes do (default: contiguous; `churn`
//! keeps its fixed slots).
//! With `SCALE_HOST_DEFERRED=M` the
//! registry runs in deferred mode, announcing every M registrations, compact or ELF (`reg`
//! flushes the rest at the end, timed as `TOTAL flush`). `SCALE_HOST_MARK=M`: `reg` also
//! prints `MARK reg I T s` each time the registered functions pass a multiple of M.

use std::time::Instant;

#[path = "support/code_buf.rs"]
mod code_buf;

use jit_interface::{Format, JitObject, LineRow, Registration};

const FN_SIZE: u64 = 64;

/// GDB breaks here to compare what it knows with the live set printed before.
#[no_mangle]
#[inline(never)]
pub extern "C" fn scale_host_checkpoint(live: usize) -> usize {
    std::hint::black_box(live)
}

/// A debugger attached to a waiting `churn` host sets this to 1 (`set var *(unsigned char *)
/// &SCALE_HOST_GO = 1`): the host then unregisters every other live object with the
/// debugger watching (batches filled without one are rewritten), writes `queries2.gdb` and
/// stops at `scale_host_checkpoint` again.
#[no_mangle]
pub static SCALE_HOST_GO: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Writes GDB commands asking for every slot's address (slot `i` at `base + i * FN_SIZE`,
/// `SLOTS` per `churn` thread) to `path`, each after the name the host has there and the file of
/// its lines (`# EXPECT ADDR NAME FILE`, or `# EXPECT ADDR - -`).
fn write_queries(path: &std::ffi::OsStr, base: u64, slots: &[Option<(String, Registration)>]) {
    let mut q = String::new();
    for (i, slot) in slots.iter().enumerate() {
        let addr = base + i as u64 * FN_SIZE;
        let (name, file) = match slot {
            Some((n, _)) => (n.as_str(), churn_file(i as u64 / SLOTS, i as u64 % SLOTS)),
            None => ("-", "-"),
        };
        q += &format!(
            "# EXPECT {addr:#x} {name} {file}\necho SLOT-QUERY {addr:#x}\\n\ninfo line *{addr:#x}\n"
        );
    }
    std::fs::write(path, q).expect("write the query file");
}

/// CPU time of the calling thread (user and kernel: page faults count), which other load on
/// the machine disturbs less than wall time.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Page faults of the calling thread so far: memory touched for the first time, which costs
/// about 2 us per 4 KiB page on the VMs these benchmarks run on (`scale_host touch` measures it).
fn thread_faults() -> u64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ru.ru_minflt as u64 + ru.ru_majflt as u64
}

/// `SCALE_HOST_GAP` (read once by `main`): the free bytes a runtime leaves after each
/// function (alignment, stubs, constant pools): a number for the same gap after every
/// function, or `random` for a pseudo-random gap of 0-256 bytes each. Default: none, the
/// functions are contiguous.
#[derive(Clone, Copy)]
enum Gap {
    Fixed(u64),
    Random,
}

static GAP: std::sync::OnceLock<Gap> = std::sync::OnceLock::new();

/// The largest gap `SCALE_HOST_GAP=random` leaves.
const MAX_RANDOM_GAP: u64 = 256;

/// The gap after function `j`.
fn gap_after(j: u64) -> u64 {
    match GAP.get() {
        None => 0,
        Some(Gap::Fixed(g)) => *g,
        Some(Gap::Random) => (j.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) % (MAX_RANDOM_GAP + 1),
    }
}

/// The start address of each of `n` functions laid out from `base` (computed before timing,
/// as a runtime knows where it put its code).
fn starts(base: u64, n: u64) -> Vec<u64> {
    let mut at = base;
    (0..n)
        .map(|j| {
            let start = at;
            at += FN_SIZE + gap_after(j);
            start
        })
        .collect()
}

/// Reserves room for `functions` functions with their gaps.
fn code_area(functions: u64) -> u64 {
    let widest_gap = match GAP.get() {
        None => 0,
        Some(Gap::Fixed(g)) => *g,
        Some(Gap::Random) => MAX_RANDOM_GAP,
    };
    let len = (functions * (FN_SIZE + widest_gap) + 4096) as usize;
    // SAFETY: a fresh anonymous reservation; nothing is ever executed in it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert!(p != libc::MAP_FAILED, "mmap failed");
    p as u64
}

/// The line rows every function gets (offsets and lines relative to the function), built
/// once like a runtime's reusable row buffer.
const ROWS: [LineRow; 8] = {
    let mut rows = [LineRow { offset: 0, line: 0 }; 8];
    let mut i = 0;
    while i < 8 {
        rows[i] = LineRow {
            offset: i as u32 * 6,
            line: 10 + i as u32,
        };
        i += 1;
    }
    rows
};

/// `SCALE_HOST_LINES=spread` (read once by `main`): each function's lines start at its own
/// place in the source (a pseudo-random line below 5,000, as functions compiled in the order
/// they got hot) instead of every function having lines 10-17, so that line deltas take
/// their real size in the payloads.
static SPREAD_LINES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Adds function `j`, starting at `start`.
fn add(obj: &mut JitObject, name: &str, j: u64, start: u64) {
    match FILES.get() {
        Some(files) => add_in(obj, name, j, start, &files[j as usize % files.len()]),
        None => add_in(obj, name, j, start, "scale.js"),
    }
}

/// `SCALE_HOST_FILES=N`: function `j`'s lines are in file `j % N` of N (`file0.js`, ...),
/// so that objects registered one by one come from N source files in turns, as a runtime
/// compiling the functions of several scripts as they are called.
static FILES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// [`add`], the lines in `file`.
#[inline(always)]
fn add_in(obj: &mut JitObject, name: &str, j: u64, start: u64, file: &str) {
    let f = obj.add_function(name, start, FN_SIZE).expect("function");
    if SPREAD_LINES.load(std::sync::atomic::Ordering::Relaxed) {
        set_spread_lines(obj, f, j, file);
    } else {
        // Through `black_box`: a runtime's rows are not known to the compiler, whose checks
        // `set_lines` would otherwise fold away for this constant array.
        obj.set_lines(f, file, std::hint::black_box(&ROWS))
            .expect("lines");
    }
    obj.set_frame_pointer(f, 1, 4).expect("frame");
}

/// The source file of the functions `churn` thread `t` registers in its slot `s`: two files,
/// by thread, so that objects of both meet in every payload (each source file has a compile
/// unit of its own); with `SCALE_HOST_FILES=N`, file `(t * SLOTS + s) % N` of N.
fn churn_file(t: u64, s: u64) -> &'static str {
    match FILES.get() {
        Some(files) => &files[((t * SLOTS + s) % files.len() as u64) as usize],
        None => ["scale.js", "other.js"][(t % 2) as usize],
    }
}

/// Out of line: the default shape costs the benchmark nothing for it.
#[inline(never)]
fn set_spread_lines(obj: &mut JitObject, f: jit_interface::FunctionId, j: u64, file: &str) {
    let first = (j.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32 % 5000;
    let mut rows = ROWS;
    for r in &mut rows {
        r.line += first;
    }
    obj.set_lines(f, file, &rows).expect("lines");
}

/// Function names: `jit_fn_` and 13 digits, 20 characters. A runtime has its names at hand,
/// so the benchmark makes them without allocating or going through `format!`: the name of
/// the function after the last one by adding one to its last digits (dividing by ten for
/// each of 13 digits, and checking the bytes are UTF-8, took about 12 ns per function, a
/// tenth of a batched ELF registration).
struct Names {
    name: String,
    /// The function whose name `name` holds.
    last: Option<u64>,
}

impl Names {
    fn new() -> Names {
        Names {
            name: String::with_capacity(20),
            last: None,
        }
    }

    /// Function `j`'s name.
    fn of(&mut self, j: u64) -> &str {
        if self.last.is_some_and(|l| l + 1 == j) && !self.name.ends_with("9999999999999") {
            // Digits 9 at the end become 0, the one before them one more.
            let mut nines = 0;
            while let Some(d @ '0'..='9') = self.name.pop() {
                if d == '9' {
                    nines += 1;
                    continue;
                }
                self.name.push(char::from(d as u8 + 1));
                break;
            }
            for _ in 0..nines {
                self.name.push('0');
            }
        } else {
            self.name.clear();
            self.name.push_str("jit_fn_");
            let digits = j.to_string();
            for _ in digits.len()..13 {
                self.name.push('0');
            }
            self.name
                .push_str(&digits[digits.len().saturating_sub(13)..]);
        }
        self.last = Some(j);
        &self.name
    }
}

fn format_arg(s: &str) -> Format {
    match s {
        "compact" => Format::Compact,
        "elf" => Format::Elf,
        _ => panic!("format must be compact or elf, not {s}"),
    }
}

/// Registers `n` functions one by one, then unregisters `m` of them, every `n / m`-th
/// (so in every batch), timing the unregistrations alone.
fn unregister_some(n: u64, m: u64, format: Format) {
    let mut regs: Vec<Option<Registration>> =
        register_all(n, 1, format).into_iter().map(Some).collect();
    let step = (n / m.clamp(1, n)) as usize;
    let hooks_before = jit_interface::descriptor::notifications().0;
    let t0 = Instant::now();
    let mut dropped = 0u64;
    for slot in regs.iter_mut().step_by(step).take(m as usize) {
        drop(slot.take());
        dropped += 1;
    }
    let dt = t0.elapsed().as_secs_f64();
    let hooks = jit_interface::descriptor::notifications().0 - hooks_before;
    eprintln!(
        "TOTAL unreg {dt:.6} s ({:.1} ns/unregistration, {dropped} of {n}, hooks {hooks} calls)",
        dt * 1e9 / dropped.max(1) as f64
    );
    scale_host_checkpoint(regs.iter().flatten().count());
    std::process::exit(0);
}

fn register_all(n: u64, k: u64, format: Format) -> Vec<Registration> {
    let at = starts(code_area(n), n);
    code_ready(&at);
    register_at(&at, k, format)
}

/// Where a debugger can put a breakpoint on JIT code before any is registered (`break
/// *(*(unsigned long *)&SCALE_HOST_PROBE)` at [`scale_host_code_ready`]): an address inside
/// the middle function, its fifth byte. Set before registering starts.
#[no_mangle]
pub static SCALE_HOST_PROBE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Called once the functions' addresses are known, before anything is registered (and
/// before timing): a session benchmark breaks here once to set its breakpoint on a JIT
/// address, which then stays set through every registration.
#[no_mangle]
#[inline(never)]
pub extern "C" fn scale_host_code_ready(probe: u64) -> u64 {
    // Not the same code as `scale_host_checkpoint`'s: the linker would fold the two into one
    // address, and a breakpoint on either would stop at both.
    std::hint::black_box(probe).rotate_left(7)
}

/// Publishes [`SCALE_HOST_PROBE`] for functions at `at` and calls [`scale_host_code_ready`].
fn code_ready(at: &[u64]) {
    let probe = at.get(at.len() / 2).map_or(0, |s| s + 4);
    SCALE_HOST_PROBE.store(probe, std::sync::atomic::Ordering::Relaxed);
    scale_host_code_ready(probe);
}

/// `SCALE_HOST_MARK=M`: `reg` also prints `MARK reg I T s` each time the registered
/// functions pass a multiple of M (I of them after T seconds), so that one run gives the
/// growth between two sizes without a second process's noise.
fn marks() -> Option<u64> {
    std::env::var("SCALE_HOST_MARK")
        .ok()?
        .parse()
        .ok()
        .filter(|&m| m > 0)
}

/// Registers functions starting at `at`, `k` per object, timing the registrations; prints
/// the `TOTAL reg` and `TOTAL merges` lines.
fn register_at(at: &[u64], k: u64, format: Format) -> Vec<Registration> {
    let n = at.len() as u64;
    // The handles' storage is set up before timing, as the floor's host sets up its entry
    // array: keeping handles is the runtime's business, not a cost of registering.
    let mut slots: Vec<Option<Registration>> = (0..n.div_ceil(k)).map(|_| None).collect();
    let t0 = Instant::now();
    let c0 = thread_cpu_s();
    let f0 = thread_faults();
    let mut names = Names::new();
    let mark = marks();
    let mut i = 0;
    while i < n {
        let mut obj = JitObject::new();
        for j in i..(i + k).min(n) {
            add(&mut obj, names.of(j), j, at[j as usize]);
        }
        slots[(i / k) as usize] = Some(jit_interface::register(&obj, format).expect("register"));
        let done = (i + k).min(n);
        if mark.is_some_and(|m| done / m > i / m) {
            eprintln!("MARK reg {done} {:.6} s", t0.elapsed().as_secs_f64());
        }
        i += k;
    }
    let dt = t0.elapsed().as_secs_f64();
    let (cpu, faults) = (thread_cpu_s() - c0, thread_faults() - f0);
    let regs: Vec<Registration> = slots.into_iter().flatten().collect();
    let bytes: usize = regs.iter().map(|r| r.payload_len()).sum();
    eprintln!(
        "TOTAL reg {dt:.6} s ({:.1} ns/function, {:.1} payload bytes/function, \
         cpu {:.1} ns/function, {:.1} page faults per 1000 functions)",
        dt * 1e9 / n as f64,
        bytes as f64 / n as f64,
        cpu * 1e9 / n as f64,
        faults as f64 * 1000.0 / n as f64
    );
    // Part of that time: merging small entries into batches (re-encoding their objects).
    let m = jit_interface::merge_stats();
    eprintln!(
        "TOTAL merges {:.6} s ({:.1} ns/function, {} merges re-encoding {} objects)",
        m.time.as_secs_f64(),
        m.time.as_secs_f64() * 1e9 / n as f64,
        m.merges,
        m.objects
    );
    regs
}

/// The part of `reg` that is not registration: building the models and encoding them once,
/// into memory that is kept, as `reg` keeps it (and as the floor's `jb build` writes every
/// payload into a pool it keeps): writing to memory for the first time is part of the cost.
/// Compact records are encoded into a reused buffer and copied into one pool (`reg` copies
/// them into batch payloads), ELF payloads are kept as encoded (`reg` links the encoder's
/// buffer) for as long as `reg` keeps them.
fn encode_all(n: u64, k: u64, format: Format) {
    let at = starts(code_area(n), n);
    // Room reserved (not touched) up front, as the registry's batch payloads are: no
    // copying as it grows.
    let mut pool: Vec<u8> = Vec::with_capacity(n as usize * 256);
    let mut scratch: Vec<u8> = Vec::new();
    let mut kept: Vec<Vec<u8>> = Vec::with_capacity(n.div_ceil(k) as usize);
    let t0 = Instant::now();
    let c0 = thread_cpu_s();
    let f0 = thread_faults();
    let mut bytes = 0;
    let mut objects = 0;
    let mut names = Names::new();
    let mut i = 0;
    while i < n {
        let mut obj = JitObject::new();
        for j in i..(i + k).min(n) {
            add(&mut obj, names.of(j), j, at[j as usize]);
        }
        match format {
            Format::Compact => {
                // As `register` does: the record (with a live check to be filled in) into
                // a buffer reused from one object to the next, then copied to where it stays.
                scratch.clear();
                let live = jit_interface::LiveCheck { address: 0, key: 1 };
                jit_interface::encode_record(&mut scratch, &obj, Some(live)).expect("encode");
                bytes += jit_interface::format::HEADER_LEN + scratch.len();
                pool.extend_from_slice(&scratch);
            }
            Format::Elf => {
                let payload = jit_interface::elf::encode(&obj).expect("encode");
                bytes += payload.len();
                // Kept as long as `reg` keeps them: objects of 64 functions or more for
                // good, smaller ones until their entry is merged into a batch 32 entries
                // later (then freed, and their memory reused; `reg` reports the merges'
                // re-encoding as merge time).
                if k >= 64 || kept.len() < 32 {
                    kept.push(payload);
                } else {
                    kept[objects % 32] = payload;
                }
                objects += 1;
            }
        }
        i += k;
    }
    let dt = t0.elapsed().as_secs_f64();
    std::hint::black_box((&pool, &kept));
    eprintln!(
        "TOTAL encode {dt:.6} s ({:.1} ns/function, {:.1} payload bytes/function, \
         cpu {:.1} ns/function, {:.1} page faults per 1000 functions)",
        dt * 1e9 / n as f64,
        bytes as f64 / n as f64,
        (thread_cpu_s() - c0) * 1e9 / n as f64,
        (thread_faults() - f0) as f64 * 1000.0 / n as f64
    );
}

/// A tiering runtime: registers `n` functions one by one, and after every `every`-th
/// unregisters the one registered `every / 2` registrations before (its code replaced by
/// an optimised version, soon after it was compiled). Times the whole run.
fn tier(n: u64, every: u64, format: Format) {
    let every = every.max(2);
    let at = starts(code_area(n), n);
    let mut regs: Vec<Option<Registration>> = (0..n).map(|_| None).collect();
    let mut names = Names::new();
    let t0 = Instant::now();
    let mut dropped = 0u64;
    for i in 0..n {
        let mut obj = JitObject::new();
        add(&mut obj, names.of(i), i, at[i as usize]);
        regs[i as usize] = Some(jit_interface::register(&obj, format).expect("register"));
        if i % every == every - 1 {
            drop(regs[(i - every / 2) as usize].take());
            dropped += 1;
        }
    }
    let dt = t0.elapsed().as_secs_f64();
    eprintln!(
        "TOTAL tier {dt:.6} s ({:.1} ns/registration, {dropped} of {n} unregistered, {} entries)",
        dt * 1e9 / n as f64,
        jit_interface::descriptor::entry_count()
    );
    scale_host_checkpoint(regs.iter().flatten().count());
    std::process::exit(0);
}

/// Registers `n` functions one by one, then unregisters them all: one by one, oldest first
/// (`how` = `one`, dropping each handle) or newest first (`newest`), or in one
/// `unregister_many` call (`many`), timing the unregistrations alone (a runtime dropping
/// its code cache, or shutting down).
fn drain(n: u64, format: Format, how: &str) {
    let regs = register_all(n, 1, format);
    let hooks_before = jit_interface::descriptor::notifications().0;
    let t0 = Instant::now();
    match how {
        "one" => {
            for r in regs {
                drop(r);
            }
        }
        "newest" => {
            let mut regs = regs;
            while let Some(r) = regs.pop() {
                drop(r);
            }
        }
        "many" => jit_interface::unregister_many(regs),
        _ => panic!("drain takes one, newest or many, not {how}"),
    }
    let dt = t0.elapsed().as_secs_f64();
    let hooks = jit_interface::descriptor::notifications().0 - hooks_before;
    eprintln!(
        "TOTAL drain {dt:.6} s ({:.1} ns/unregistration, {how}, hooks {hooks} calls, {} entries left)",
        dt * 1e9 / n.max(1) as f64,
        jit_interface::descriptor::entry_count()
    );
    std::process::exit(0);
}

/// The cost of memory written for the first time: maps `pages` fresh pages and writes a byte
/// to each, timed (a page fault each). What every byte a registration keeps costs here.
fn touch(pages: u64) {
    const PAGE: usize = 4096;
    // Written page by page: a trap per page. Then as the registry writes large payloads:
    // all pages faulted in by one call first (`MADV_POPULATE_WRITE`).
    for populate in [false, true] {
        let mut memory = code_buf::CodeBuf::new(pages as usize * PAGE);
        let (f0, c0, t0) = (thread_faults(), thread_cpu_s(), Instant::now());
        if populate {
            // SAFETY: the range is the fresh mapping `memory` owns; the call only maps its
            // pages in (as writes would), changing no byte.
            let rc = unsafe {
                libc::madvise(
                    memory.base() as *mut libc::c_void,
                    pages as usize * PAGE,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            if rc != 0 {
                eprintln!("TOTAL touch populated: not available on this kernel");
                return;
            }
        }
        for i in 0..pages as usize {
            memory.write(i * PAGE, &[1]);
        }
        let (dt, cpu) = (t0.elapsed().as_secs_f64(), thread_cpu_s() - c0);
        let faults = thread_faults() - f0;
        eprintln!(
            "TOTAL touch{} {dt:.6} s ({:.1} ns/page, cpu {:.1} ns/page, {faults} page faults for {pages} pages)",
            if populate { " populated" } else { "" },
            dt * 1e9 / pages as f64,
            cpu * 1e9 / pages as f64
        );
    }
}

/// Code slots per `churn` thread.
const SLOTS: u64 = 64;

/// `gapfill N compact|elf`: code with gaps, and code put in those gaps later, as a runtime
/// whose allocator fills holes does. Registers N functions one by one, 256 bytes apart
/// (64-byte functions, 192 free bytes after each); then functions inside some of those gaps
/// (ELF and compact in turns); then unregisters every 50th of the first ones and registers
/// new functions where they were; then (ELF) an object of 100 gapped functions alone, and
/// tries one inside its gaps, which must be refused (printed as `REFUSED: ...`). Writes
/// `SCALE_HOST_QUERIES` (`# EXPECT ADDR NAME FILE` and an `info line` per live function,
/// and per free gap address, expected `-`), and stops in `scale_host_checkpoint`.
fn gapfill(n: u64, format: Format) {
    const STRIDE: u64 = 256;
    let base = code_area(n * STRIDE / FN_SIZE + 200 * STRIDE / FN_SIZE);
    let mut live: Vec<(u64, String, &str, Option<Registration>)> = Vec::new();
    let one = |name: String, at: u64, file: &'static str, format: Format| {
        let mut obj = JitObject::new();
        add_in(&mut obj, &name, 0, at, file);
        let r = jit_interface::register(&obj, format).expect("register");
        (at, name, file, Some(r))
    };
    for j in 0..n {
        live.push(one(
            format!("gold_{j:05}"),
            base + j * STRIDE,
            "scale.js",
            format,
        ));
    }
    let mut filled = std::collections::HashSet::new();
    for k in 0..n / 20 {
        let j = k * 37 % n;
        filled.insert(j);
        let f = if k % 2 == 0 {
            Format::Elf
        } else {
            Format::Compact
        };
        live.push(one(
            format!("gfill_{k:05}"),
            base + j * STRIDE + 96,
            "fill.js",
            f,
        ));
    }
    for j in (0..n as usize).step_by(50) {
        drop(live[j].3.take());
        live.push(one(
            format!("gagain_{j:05}"),
            base + j as u64 * STRIDE,
            "again.js",
            format,
        ));
    }
    let big_base = base + n * STRIDE;
    let big = (format == Format::Elf).then(|| {
        let mut obj = JitObject::new();
        for i in 0..100 {
            add_in(
                &mut obj,
                &format!("gbig_{i:03}"),
                i,
                big_base + i * STRIDE,
                "big.js",
            );
        }
        let r = jit_interface::register(&obj, format).expect("register the big object");
        let mut inside = JitObject::new();
        add_in(
            &mut inside,
            "ginside",
            0,
            big_base + 10 * STRIDE + 96,
            "fill.js",
        );
        match jit_interface::register(&inside, format) {
            Ok(_) => println!("NOT REFUSED: code inside the big object's gaps was registered"),
            Err(e) => println!("REFUSED: {e}"),
        }
        r
    });
    let mut q = String::new();
    let mut expect = |addr: u64, name: &str, file: &str| {
        q += &format!(
            "# EXPECT {addr:#x} {name} {file}\necho SLOT-QUERY {addr:#x}\\n\ninfo line *{addr:#x}\n"
        );
    };
    for (at, name, file, reg) in &live {
        if reg.is_some() {
            expect(*at, name, file);
        }
    }
    if big.is_some() {
        for i in 0..100 {
            expect(big_base + i * STRIDE, &format!("gbig_{i:03}"), "big.js");
        }
        expect(big_base + 10 * STRIDE + 96, "-", "-");
    }
    for j in (0..n).step_by(7).filter(|j| !filled.contains(j)) {
        expect(base + j * STRIDE + 128, "-", "-");
    }
    let path = std::env::var_os("SCALE_HOST_QUERIES").unwrap_or_else(|| "queries.gdb".into());
    std::fs::write(path, q).expect("write the query file");
    scale_host_checkpoint(live.iter().filter(|l| l.3.is_some()).count());
    drop(big);
    std::process::exit(0);
}

fn churn(threads: u64, ops: u64, format: Format, wait: bool) {
    let base = code_area(threads * SLOTS);
    let t0 = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut slots: Vec<Option<(String, Registration)>> =
                    (0..SLOTS).map(|_| None).collect();
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                for op in 0..ops {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let s = x % SLOTS;
                    match slots[s as usize].take() {
                        Some(_dropped) => {}
                        None => {
                            let name = format!("sc_{t}_{s}_{op}");
                            let mut obj = JitObject::new();
                            let start = base + (t * SLOTS + s) * FN_SIZE;
                            add_in(&mut obj, &name, t * SLOTS + s, start, churn_file(t, s));
                            let r = jit_interface::register(&obj, format).expect("register");
                            slots[s as usize] = Some((name, r));
                        }
                    }
                }
                slots
            })
        })
        .collect();
    let mut slots: Vec<Option<(String, Registration)>> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("thread"))
        .collect();
    let dt = t0.elapsed().as_secs_f64();
    let (stops, bytes) = jit_interface::descriptor::notifications();
    eprintln!("TOTAL churn {dt:.6} s, hooks {stops} calls, {bytes} bytes announced");
    // Every slot's address with the function registered there now, or `-`.
    for (i, slot) in slots.iter().enumerate() {
        let addr = base + i as u64 * FN_SIZE;
        match slot {
            Some((name, _)) => println!("SLOT {addr:#x} {name}"),
            None => println!("SLOT {addr:#x} -"),
        }
    }
    // With SCALE_HOST_QUERIES=FILE, write GDB commands asking for every slot's address, for
    // the debugger to `source` at the checkpoint.
    // (Waiting for a debugger to attach: `queries.gdb` in the current directory if unset.)
    let queries = std::env::var_os("SCALE_HOST_QUERIES")
        .or_else(|| wait.then(|| std::ffi::OsString::from("queries.gdb")));
    if let Some(path) = queries {
        write_queries(&path, base, &slots);
    }
    let live = slots.iter().flatten().count();
    println!("LIVE-COUNT {live}");
    scale_host_checkpoint(live);
    if wait {
        // For a debugger that attaches now (the churn ran without one).
        println!("ready pid={}", std::process::id());
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let t0 = Instant::now();
        while SCALE_HOST_GO.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            if t0.elapsed().as_secs() >= 600 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Half of them one by one, half in one call (each batch rewritten once).
        let mut gone: Vec<Registration> = slots
            .iter_mut()
            .filter(|s| s.is_some())
            .step_by(2)
            .filter_map(|s| s.take().map(|(_, r)| r))
            .collect();
        let together = gone.split_off(gone.len() / 2);
        drop(gone);
        jit_interface::unregister_many(together);
        write_queries("queries2.gdb".as_ref(), base, &slots);
        scale_host_checkpoint(slots.iter().flatten().count());
        std::thread::sleep(std::time::Duration::from_secs(600));
    }
}

/// The code of every function of `run`: a frame-pointer frame around an indirect call to
/// the first address of the list `rdi` points to, passing the rest on, so that any list of
/// functions ending in a native one makes a call chain.
const CHAIN_FN: [u8; 15] = [
    0x55, // push rbp
    0x48, 0x89, 0xe5, // mov rbp, rsp
    0x48, 0x8b, 0x07, // mov rax, [rdi]
    0x48, 0x8d, 0x7f, 0x08, // lea rdi, [rdi + 8]
    0xff, 0xd0, // call rax
    0x5d, // pop rbp
    0xc3, // ret
];

/// The native end of `run`'s call chain: a debugger breaks here with JIT frames above.
#[no_mangle]
#[inline(never)]
pub extern "C" fn scale_host_jit_stop(rest: *const u64) -> u64 {
    std::hint::black_box(rest as u64)
}

/// Function `j`'s source file and line rows, as [`add`] registers them.
fn registered_lines(j: u64) -> (String, [LineRow; 8]) {
    let file = match FILES.get() {
        Some(files) => files[j as usize % files.len()].clone(),
        None => "scale.js".to_string(),
    };
    let mut rows = ROWS;
    if SPREAD_LINES.load(std::sync::atomic::Ordering::Relaxed) {
        let first = (j.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32 % 5000;
        for r in &mut rows {
            r.line += first;
        }
    }
    (file, rows)
}

/// `run N K F`: like `reg`, but every function is real code ([`CHAIN_FN`]); once all are
/// registered, prints a `jit-fn` line for each of functions N-1, N/2 and 0 (name, start,
/// size, source file, line rows as `OFFSET:LINE`) and calls them in that order, the last
/// calling [`scale_host_jit_stop`]: a debugger stopped there sees the three JIT frames.
fn run_chain(n: u64, k: u64, format: Format) {
    assert!(n >= 3, "run needs at least 3 functions, not {n}");
    let offsets = starts(0, n);
    let mut buf = code_buf::CodeBuf::new((offsets[n as usize - 1] + FN_SIZE) as usize);
    for &o in &offsets {
        buf.write(o as usize, &CHAIN_FN);
    }
    let base = buf.make_executable();
    let at: Vec<u64> = offsets.iter().map(|o| base + o).collect();
    code_ready(&at);
    let regs = register_at(&at, k, format);
    let (stops, bytes) = jit_interface::descriptor::notifications();
    eprintln!(
        "TOTAL hooks {stops} calls, {bytes} bytes announced, {} entries",
        jit_interface::descriptor::entry_count()
    );
    let chain = [n - 1, n / 2, 0];
    let mut names = Names::new();
    for &j in &chain {
        let (file, rows) = registered_lines(j);
        let lines: Vec<String> = rows
            .iter()
            .map(|r| format!("{}:{}", r.offset, r.line))
            .collect();
        println!(
            "jit-fn name={} start={:#x} size={FN_SIZE} file={file} lines={}",
            names.of(j),
            at[j as usize],
            lines.join(",")
        );
    }
    use std::io::Write;
    std::io::stdout().flush().expect("flush stdout");
    let list: Vec<u64> = chain
        .iter()
        .skip(1)
        .map(|&j| at[j as usize])
        .chain([scale_host_jit_stop as *const () as u64])
        .collect();
    // SAFETY: the entry is CHAIN_FN in executable memory, a C-ABI function of one pointer
    // argument that calls each address of `list` in turn (each of them CHAIN_FN, the last
    // `scale_host_jit_stop`), reading one more entry of `list` per call: `list` holds them.
    let first = unsafe {
        std::mem::transmute::<usize, extern "C" fn(*const u64) -> u64>(
            at[chain[0] as usize] as usize,
        )
    };
    let got = first(list.as_ptr());
    assert_eq!(got, list.as_ptr() as u64 + 8 * list.len() as u64);
    scale_host_checkpoint(regs.len());
    std::process::exit(0);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match std::env::var("SCALE_HOST_LINES") {
        Ok(v) if v == "spread" => SPREAD_LINES.store(true, std::sync::atomic::Ordering::Relaxed),
        Ok(v) if v.is_empty() || v == "same" => {}
        Err(_) => {}
        Ok(v) => panic!("SCALE_HOST_LINES must be spread or same, not {v}"),
    }
    if let Ok(v) = std::env::var("SCALE_HOST_FILES") {
        let n: usize = v.parse().expect("SCALE_HOST_FILES must be a number");
        if n > 1 {
            let _ = FILES.set((0..n).map(|i| format!("file{i}.js")).collect());
        }
    }
    // SCALE_HOST_DEFERRED=M: deferred mode, announcing every M registrations; the pending rest
    // is flushed before the checkpoint.
    let deferred = std::env::var("SCALE_HOST_DEFERRED").ok().map(|v| {
        v.parse::<usize>()
            .expect("SCALE_HOST_DEFERRED must be a number")
    });
    if let Some(m) = deferred {
        jit_interface::set_deferred(Some(jit_interface::Deferral {
            max_pending: m,
            max_delay: None,
        }));
    }
    match std::env::var("SCALE_HOST_GAP").as_deref() {
        Err(_) | Ok("") | Ok("0") => {}
        Ok("random") => {
            let _ = GAP.set(Gap::Random);
        }
        Ok(v) => {
            let g = v
                .parse()
                .expect("SCALE_HOST_GAP must be a number of bytes or random");
            let _ = GAP.set(Gap::Fixed(g));
        }
    }
    let num = |i: usize| -> u64 { args[i].parse().expect("number") };
    match args.get(1).map(String::as_str) {
        Some("reg") => {
            if std::env::var_os("SCALE_HOST_WARM").is_some_and(|v| v == "1") {
                // A first round registered and dropped: the timed round reuses its memory,
                // as a runtime that replaces code does (no page faults for fresh memory).
                drop(register_all(num(2), num(3), format_arg(&args[4])));
            }
            let regs = register_all(num(2), num(3), format_arg(&args[4]));
            if deferred.is_some() {
                let t0 = Instant::now();
                let n = jit_interface::flush();
                eprintln!(
                    "TOTAL flush {:.6} s ({n} pending)",
                    t0.elapsed().as_secs_f64()
                );
            }
            let (stops, bytes) = jit_interface::descriptor::notifications();
            eprintln!(
                "TOTAL hooks {stops} calls, {bytes} bytes announced, {} entries",
                jit_interface::descriptor::entry_count()
            );
            scale_host_checkpoint(regs.len());
            // Exit with everything registered, like the floor: `reg` measures registration.
            std::process::exit(0);
        }
        Some("run") => run_chain(num(2), num(3), format_arg(&args[4])),
        Some("encode") => encode_all(num(2), num(3), format_arg(&args[4])),
        Some("touch") => touch(num(2)),
        Some("attach") => {
            let regs = register_all(num(2), num(3), format_arg(&args[4]));
            println!("PID {}", std::process::id());
            std::thread::sleep(std::time::Duration::from_secs(600));
            drop(regs);
        }
        Some("unreg") => unregister_some(num(2), num(3), format_arg(&args[4])),
        Some("tier") => tier(num(2), num(3), format_arg(&args[4])),
        Some("drain") => drain(num(2), format_arg(&args[3]), &args[4]),
        Some("gapfill") => gapfill(num(2), format_arg(&args[3])),
        Some("churn") => churn(
            num(2),
            num(3),
            format_arg(&args[4]),
            args.get(5).is_some_and(|a| a == "wait"),
        ),
        _ => {
            eprintln!(
                "usage: scale_host reg|run|encode|attach N K compact|elf | unreg N M compact|elf \
                 | tier N EVERY compact|elf | churn T OPS compact|elf [wait] | touch PAGES"
            );
            std::process::exit(2);
        }
    }
}
