//! `jit-gdb`: run GDB on JIT-compiled code: the rust-gdb-style launcher, the bundled demo
//! JIT (`jit-gdb demo`) and core-file reports. See `jit-gdb --help`.

mod cli;
mod core_check;
mod demo;
mod exec_mem;
mod inspect;
mod launch;

use cli::Command;

fn main() {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let cmd = match cli::parse(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jit-gdb: {e}");
            std::process::exit(2);
        }
    };
    let result = match cmd {
        Command::Help => {
            print!("{}", cli::HELP);
            Ok(0)
        }
        Command::Version => {
            println!("jit-gdb {}", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
        Command::ReaderPath => launch::find_reader().map(|p| {
            println!("{}", p.display());
            0
        }),
        Command::Demo {
            format,
            crash,
            keep_core,
            arch,
        } => {
            if arch == jit_interface::Arch::HOST {
                launch::demo(format, crash, keep_core)
            } else {
                launch::demo_under_qemu(arch, format, crash)
            }
        }
        // The script's `main` value is the exit status (the OS keeps its low 8 bits).
        Command::RunScript {
            file,
            format,
            crash,
        } => demo::run_script(&file, format, crash).map(|v| v as i32),
        Command::Inspect(options) => inspect::run(&options),
        Command::Core {
            program,
            core,
            check,
        } => launch::core_report(&program, &core, check),
        Command::Gdb { args, check } => launch::exec_gdb(args, check),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("jit-gdb: {e}");
            std::process::exit(1);
        }
    }
}
