//! `cranelift elf|compact`: three functions compiled by cranelift-jit, `outer` -> `middle`
//! -> `inner`, and `inner` calls back into native code (`jit_native_stop`, the place to put
//! a breakpoint). `outer` and `middle` keep values live across their calls, so cranelift
//! gives them callee-saved registers (r12-r14, rbx). The functions are registered with GDB
//! through jit-cranelift, in the payload format named on the command line, with their
//! source text (`chain.src`, which exists nowhere on disk).
//!
//! It prints one `jit-fn` line per function (name, address, size, line rows, file) before
//! running them, then the result: what the end-to-end test (`tests/cranelift.rs`) reads.

use std::collections::HashMap;
use std::error::Error;

use cranelift_codegen::ir::{
    types::I64, AbiParam, FuncRef, InstBuilder, Signature, SourceLoc, UserFuncName, Value,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module};
use jit_cranelift::{Callee, CompiledFunction, Lines};
use jit_interface::{CallTarget, Format, JitObject};

/// The program's source; the line of each statement is its cranelift source location.
const FILE: &str = "chain.src";
const SOURCE: &str = "\
fn inner(a) {
  return stop(a + 1) * 2;
}
fn middle(a) {
  let x = a * 3, y = a * 5, z = a * 7;
  let r = inner(x ^ y ^ z);
  return r + x + y + z;
}
fn outer(a) {
  let p = a + 0x1000, q = a + 0x2000;
  let r = middle(p * q);
  return r + p + q;
}
";

/// The native function `inner` calls: a breakpoint here stops with every JIT frame live.
#[no_mangle]
#[inline(never)]
pub extern "C" fn jit_native_stop(x: i64) -> i64 {
    std::hint::black_box(x) + 1
}

/// Called once the code is registered, before it runs, with the three functions' addresses:
/// a debugger breaks here to set breakpoints in the JIT code.
#[no_mangle]
#[inline(never)]
pub extern "C" fn jit_cranelift_ready(outer: u64, middle: u64, inner: u64) {
    std::hint::black_box((outer, middle, inner));
}

/// The code of a function body: returns the value the function returns.
type Body = fn(&mut Builder) -> Value;

/// A function body being built: the builder, the one function it calls, its argument.
struct Builder<'a> {
    b: FunctionBuilder<'a>,
    callee: FuncRef,
    arg: Value,
}

impl Builder<'_> {
    /// The code built from now on is of source line `line`.
    fn line(&mut self, line: u32) {
        self.b.set_srcloc(SourceLoc::new(line));
    }
    fn call(&mut self, arg: Value) -> Value {
        let call = self.b.ins().call(self.callee, &[arg]);
        self.b.inst_results(call)[0]
    }
}

fn inner_body(c: &mut Builder) -> Value {
    c.line(2);
    let a1 = c.b.ins().iadd_imm_s(c.arg, 1);
    let r = c.call(a1);
    c.b.ins().imul_imm_s(r, 2)
}

fn middle_body(c: &mut Builder) -> Value {
    c.line(5);
    let x = c.b.ins().imul_imm_s(c.arg, 3);
    let y = c.b.ins().imul_imm_s(c.arg, 5);
    let z = c.b.ins().imul_imm_s(c.arg, 7);
    c.line(6);
    let xy = c.b.ins().bxor(x, y);
    let xyz = c.b.ins().bxor(xy, z);
    let r = c.call(xyz);
    c.line(7);
    let s = c.b.ins().iadd(r, x);
    let s = c.b.ins().iadd(s, y);
    c.b.ins().iadd(s, z)
}

fn outer_body(c: &mut Builder) -> Value {
    c.line(10);
    let p = c.b.ins().iadd_imm_s(c.arg, 0x1000);
    let q = c.b.ins().iadd_imm_s(c.arg, 0x2000);
    c.line(11);
    let pq = c.b.ins().imul(p, q);
    let r = c.call(pq);
    c.line(12);
    let s = c.b.ins().iadd(r, p);
    c.b.ins().iadd(s, q)
}

/// Compiles `body` as function `id`, calling `callee`, and captures it for the debugger.
fn define(
    module: &mut JITModule,
    id: FuncId,
    sig: &Signature,
    callee: FuncId,
    body: Body,
) -> Result<CompiledFunction, Box<dyn Error>> {
    let mut ctx = module.make_context();
    ctx.func.signature = sig.clone();
    ctx.func.name = UserFuncName::user(0, id.as_u32());
    let mut fbc = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fbc);
        let callee = module.declare_func_in_func(callee, b.func);
        let block = b.create_block();
        b.append_block_params_for_function_params(block);
        b.switch_to_block(block);
        b.seal_block(block);
        let arg = b.block_params(block)[0];
        let mut c = Builder { b, callee, arg };
        let v = body(&mut c);
        c.b.ins().return_(&[v]);
        c.b.finalize(module.isa().frontend_config());
    }
    module.define_function(id, &mut ctx)?;
    let captured = CompiledFunction::capture(&ctx, module.isa())?;
    module.clear_context(&mut ctx);
    Ok(captured)
}

fn main() -> Result<(), Box<dyn Error>> {
    let format = match std::env::args().nth(1).as_deref() {
        Some("elf") => Format::Elf,
        Some("compact") => Format::Compact,
        other => {
            eprintln!("usage: cranelift elf|compact (got {other:?})");
            std::process::exit(2);
        }
    };

    let mut flags = settings::builder();
    flags.set("preserve_frame_pointers", "true")?;
    flags.set("opt_level", "speed")?;
    let isa = cranelift_native::builder()?.finish(settings::Flags::new(flags))?;
    let mut jit = JITBuilder::with_isa(isa, default_libcall_names());
    jit.symbol("jit_native_stop", jit_native_stop as *const u8);
    let mut module = JITModule::new(jit);

    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(I64));
    sig.returns.push(AbiParam::new(I64));
    let native = module.declare_function("jit_native_stop", Linkage::Import, &sig)?;
    let inner = module.declare_function("inner", Linkage::Local, &sig)?;
    let middle = module.declare_function("middle", Linkage::Local, &sig)?;
    let outer = module.declare_function("outer", Linkage::Local, &sig)?;
    let compiled = [
        (
            "inner",
            inner,
            define(&mut module, inner, &sig, native, inner_body)?,
        ),
        (
            "middle",
            middle,
            define(&mut module, middle, &sig, inner, middle_body)?,
        ),
        (
            "outer",
            outer,
            define(&mut module, outer, &sig, middle, outer_body)?,
        ),
    ];
    module.finalize_definitions()?;

    // --- Registration with the debugger: the glue a user writes (begin) ---
    let mut targets: HashMap<u32, CallTarget> = HashMap::new();
    targets.insert(
        native.as_u32(),
        CallTarget::Symbol {
            address: jit_native_stop as *const () as u64,
            name: "jit_native_stop".into(),
        },
    );
    for (_, id, _) in &compiled {
        let address = module.get_finalized_function(*id) as u64;
        targets.insert(id.as_u32(), CallTarget::Address(address));
    }
    let mut obj = JitObject::new();
    obj.set_source(FILE, SOURCE)?;
    for (name, id, f) in &compiled {
        let address = module.get_finalized_function(*id) as u64;
        let lines = Lines {
            file: FILE,
            line_of: &mut |loc: SourceLoc| Some(loc.bits()),
        };
        f.add_to(
            &mut obj,
            name,
            address,
            Some(lines),
            &mut |callee: &Callee| match callee {
                Callee::User(n) => targets.get(&n.index).cloned(),
                _ => None,
            },
        )?;
    }
    let registration = jit_interface::register(&obj, format)?;
    // --- Registration with the debugger (end) ---

    for f in obj.functions() {
        let lines: Vec<String> = f
            .lines()
            .iter()
            .map(|r| format!("{}:{}", r.offset, r.line))
            .collect();
        println!(
            "jit-fn name={} start={:#x} size={} lines={} file={FILE}",
            f.name(),
            f.start(),
            f.size(),
            lines.join(",")
        );
    }
    let addr = |id: FuncId| module.get_finalized_function(id) as u64;
    jit_cranelift_ready(addr(outer), addr(middle), addr(inner));
    // SAFETY: `outer` was compiled with this signature (one i64 in, one out, the platform's
    // default calling convention) and the module, which owns its code, is alive.
    let run: extern "C" fn(i64) -> i64 =
        unsafe { std::mem::transmute(module.get_finalized_function(outer)) };
    let result = run(10);
    println!("outer(10) = {result}");
    drop(registration);
    Ok(())
}
