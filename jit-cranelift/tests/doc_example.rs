//! The crate documentation's example, run (rustdoc does not run it: see Cargo.toml): a
//! function compiled with cranelift, captured, described and registered.

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{types::I64, AbiParam, InstBuilder, Signature, SourceLoc};
use cranelift_codegen::isa::CallConv;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use jit_cranelift::{CompiledFunction, Lines};
use jit_interface::{Format, JitObject};
#[test]
fn crate_doc_example() -> Result<(), Box<dyn std::error::Error>> {
    let mut flags = settings::builder();
    flags.set("preserve_frame_pointers", "true")?;
    let isa = cranelift_native::builder()?.finish(settings::Flags::new(flags))?;
    let mut ctx = cranelift_codegen::Context::new();
    let mut sig = Signature::new(CallConv::SystemV);
    sig.params.push(AbiParam::new(I64));
    sig.returns.push(AbiParam::new(I64));
    ctx.func.signature = sig;
    let mut fbc = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut ctx.func, &mut fbc);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let a = b.block_params(block)[0];
    b.set_srcloc(SourceLoc::new(1));
    let r = b.ins().iadd_imm_s(a, 1);
    b.ins().return_(&[r]);
    b.finalize(isa.frontend_config());
    ctx.compile(&*isa, &mut ControlPlane::default())
        .map_err(|e| format!("{e:?}"))?;
    // `ctx` holds a function cranelift just compiled (source location 1: line 1).
    let compiled = CompiledFunction::capture(&ctx, &*isa)?;
    // Its code, where it will run (cranelift-jit: `get_finalized_function`).
    let code = ctx.compiled_code().unwrap().code_buffer().to_vec();
    let mut obj = JitObject::new();
    let line_of = &mut |loc: SourceLoc| Some(loc.bits());
    compiled.add_to(
        &mut obj,
        "add_one",
        code.as_ptr() as u64,
        Some(Lines {
            file: "demo.src",
            line_of,
        }),
        &mut |_callee| None,
    )?;
    let registration = jit_interface::register(&obj, Format::Elf)?;
    // What the example described: the function, its size, line 1 where the source location is.
    let f = obj.functions().first().expect("one function");
    assert_eq!((f.name(), f.size() as usize), ("add_one", code.len()));
    assert!(f.lines().iter().any(|r| r.line == 1), "{:?}", f.lines());
    drop(registration);
    Ok(())
}
