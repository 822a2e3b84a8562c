//! What jit-cranelift captures of a function cranelift really compiles (x86-64, frame
//! pointers preserved): a function keeping three values live across a call to a user
//! function, so cranelift saves callee-saved registers in its frame.

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{
    types::I64, AbiParam, ExtFuncData, ExternalName, InstBuilder, Signature, SourceLoc,
    UserExternalName, UserFuncName,
};
use cranelift_codegen::isa::{CallConv, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use jit_cranelift::{Callee, CompiledFunction, Error, Lines};
use jit_interface::arch::x86_64::CALLEE_SAVED;
use jit_interface::{
    CallTarget, CfaBase, JitObject, LineRow, RegisterRule, SavedRegister, UnwindRow,
};

fn isa() -> OwnedTargetIsa {
    let mut flags = settings::builder();
    flags.set("preserve_frame_pointers", "true").unwrap();
    flags.set("opt_level", "speed").unwrap();
    cranelift_native::builder()
        .unwrap()
        .finish(settings::Flags::new(flags))
        .unwrap()
}

/// `f(a) = callee(3a ^ 5a ^ 7a) + 3a + 5a + 7a`, lines 1 (the products), 2 (the call) and 3
/// (the sum); the callee is user function (0, 3).
fn compiled(isa: &OwnedTargetIsa) -> Context {
    let mut sig = Signature::new(CallConv::SystemV);
    sig.params.push(AbiParam::new(I64));
    sig.returns.push(AbiParam::new(I64));
    let mut ctx = Context::new();
    ctx.func.signature = sig.clone();
    ctx.func.name = UserFuncName::user(0, 7);
    let mut fbc = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut ctx.func, &mut fbc);
    let name = b
        .func
        .declare_imported_user_function(UserExternalName::new(0, 3));
    let signature = b.import_signature(sig);
    let callee = b.import_function(ExtFuncData {
        name: ExternalName::User(name),
        signature,
        colocated: true,
        patchable: false,
    });
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let a = b.block_params(block)[0];
    b.set_srcloc(SourceLoc::new(1));
    let x = b.ins().imul_imm_s(a, 3);
    let y = b.ins().imul_imm_s(a, 5);
    let z = b.ins().imul_imm_s(a, 7);
    b.set_srcloc(SourceLoc::new(2));
    let xy = b.ins().bxor(x, y);
    let xyz = b.ins().bxor(xy, z);
    let call = b.ins().call(callee, &[xyz]);
    let r = b.inst_results(call)[0];
    b.set_srcloc(SourceLoc::new(3));
    let s = b.ins().iadd(r, x);
    let s = b.ins().iadd(s, y);
    let s = b.ins().iadd(s, z);
    b.ins().return_(&[s]);
    b.finalize(isa.frontend_config());
    ctx.compile(&**isa, &mut ControlPlane::default()).unwrap();
    ctx
}

#[test]
fn captures_frame_rows_saved_registers_calls_and_lines() {
    let isa = isa();
    let ctx = compiled(&isa);
    let size = ctx.compiled_code().unwrap().code_info().total_size;
    let f = CompiledFunction::capture(&ctx, &*isa).unwrap();
    assert_eq!(f.size(), size);

    // Entry, after `push rbp`, after `mov rbp, rsp`; no epilogue (cranelift declares none).
    let rows = f.unwind_rows();
    let shape: Vec<(CfaBase, i32, i32)> = rows
        .iter()
        .map(|r| (r.cfa_base, r.cfa_offset, r.fp_offset))
        .collect();
    assert_eq!(
        shape,
        [
            (CfaBase::Sp, 8, 0),
            (CfaBase::Sp, 16, -16),
            (CfaBase::Fp, 16, -16)
        ],
        "{rows:?}"
    );
    assert_eq!(rows[0], UnwindRow::X86_64_ENTRY);
    assert!(rows[1].offset == 1 && rows[2].offset == 4, "{rows:?}");

    // Three values live across the call: three callee-saved registers, each in its own slot
    // below the saved rbp, described once the frame is set up.
    let saved = f.save_slots();
    assert_eq!(saved.len(), 3, "{saved:?}");
    let mut slots: Vec<i32> = saved.iter().map(|s| s.cfa_offset).collect();
    slots.sort();
    slots.dedup();
    assert_eq!(slots.len(), 3, "{saved:?}");
    for s in saved {
        assert!([3, 12, 13, 14, 15].contains(&s.register), "{s:?}");
        assert!(s.cfa_offset < -16 && s.offset >= rows[2].offset, "{s:?}");
    }

    let calls = f.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].callee, Callee::User(UserExternalName::new(0, 3)));
    assert!(calls[0].return_offset > 4 && calls[0].return_offset < size);

    // Line rows start after the prologue, for lines 1 to 3, and never repeat a line; gaps
    // (line 0) only between lines or last.
    let lines = f.line_rows(&mut |loc| Some(loc.bits()));
    assert!(lines[0].offset > 4 && !lines[0].is_gap(), "{lines:?}");
    assert!(lines
        .windows(2)
        .all(|w| w[0].offset < w[1].offset && w[0].line != w[1].line));
    let mut seen: Vec<u32> = lines.iter().filter_map(|r| r.source_line()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, [1, 2, 3], "{lines:?}");
    // A mapping that gives a location no line: a gap where its code starts.
    let no_two = f.line_rows(&mut |loc| Some(loc.bits()).filter(|&l| l != 2));
    assert!(no_two.iter().all(|r| r.line != 2), "{no_two:?}");
    for (r, g) in lines.iter().zip(&no_two) {
        assert_eq!(r.offset, g.offset, "{lines:?} {no_two:?}");
        assert_eq!(g.line, if r.line == 2 { LineRow::GAP } else { r.line });
    }

    // Into an object: everything above, the callee resolved by the caller's mapping.
    let mut obj = JitObject::new();
    let base = 0x7000_0000;
    let id = f
        .add_to(
            &mut obj,
            "middle",
            base,
            Some(Lines {
                file: "m.src",
                line_of: &mut |loc| Some(loc.bits()),
            }),
            &mut |c| {
                (*c == Callee::User(UserExternalName::new(0, 3)))
                    .then_some(CallTarget::Address(0x6000_0000))
            },
        )
        .unwrap();
    obj.validate().unwrap();
    let g = obj.functions().get(id).unwrap();
    assert_eq!((g.name(), g.start(), g.size()), ("middle", base, size));
    assert_eq!((g.file(), g.lines()), (Some("m.src"), &lines[..]));
    assert_eq!(g.frame().rows(obj.arch(), u64::from(size)), rows);
    assert_eq!(g.calls().len(), 1);
    assert_eq!(g.calls()[0].return_offset, calls[0].return_offset);
    assert_eq!(g.calls()[0].target, CallTarget::Address(0x6000_0000));
    // The saved registers at their slots from where they are saved; the other callee-saved
    // registers unchanged from the start.
    let mut want: Vec<SavedRegister> = CALLEE_SAVED
        .iter()
        .filter(|&&r| !saved.iter().any(|s| s.register == r))
        .map(|&reg| SavedRegister {
            offset: 0,
            reg,
            rule: RegisterRule::SameValue,
        })
        .collect();
    want.extend(saved.iter().map(|s| SavedRegister {
        offset: s.offset,
        reg: s.register,
        rule: RegisterRule::AtCfa(s.cfa_offset),
    }));
    assert_eq!(g.register_rules(), &want[..]);
    // Without lines: no rows; an unknown callee: an indirect call.
    let mut obj = JitObject::new();
    let id = f.add_to(&mut obj, "m", base, None, &mut |_| None).unwrap();
    let g = obj.functions().get(id).unwrap();
    assert_eq!(g.lines(), &[] as &[LineRow]);
    assert_eq!(g.calls()[0].target, CallTarget::Indirect);
}

#[test]
fn a_context_without_compiled_code_is_refused_by_name() {
    let isa = isa();
    let e = CompiledFunction::capture(&Context::new(), &*isa).unwrap_err();
    assert!(matches!(e, Error::NotCompiled), "{e:?}");
    assert!(e.to_string().contains("no compiled code"), "{e}");
    // A function that does not fit the object: jit-interface's own error, passed on.
    let ctx = compiled(&isa);
    let f = CompiledFunction::capture(&ctx, &*isa).unwrap();
    let e = f
        .add_to(&mut JitObject::new(), "", 0x1000, None, &mut |_| None)
        .unwrap_err();
    assert!(matches!(e, Error::Model(_)), "{e:?}");
}
