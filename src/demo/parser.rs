//! Parser of the demo language: tokens to a syntax tree.
//!
//! ```text
//! program := function*
//! function := "fn" NAME "(" [NAME ("," NAME)*] ")" block
//! block := "{" statement* "}"
//! statement := "let" NAME "=" expr ";" | NAME "=" expr ";"
//!            | "if" expr block ["else" (block | if-statement)]
//!            | "while" expr block | "return" [expr] ";" | expr ";"
//! expr := sum [("<" | "<=" | ">" | ">=" | "==" | "!=") sum]
//! sum := product (("+" | "-") product)*
//! product := unary (("*" | "/" | "%") unary)*
//! unary := "-" unary | NUMBER | NAME | NAME "(" [expr ("," expr)*] ")" | "(" expr ")"
//! ```

use super::lexer::{Tok, Token};
use super::{Pos, ScriptError};

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExprKind {
    Int(i64),
    Var(String),
    Call(String, Vec<Expr>),
    Neg(Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr {
    pub pos: Pos,
    pub kind: ExprKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StmtKind {
    Let(String, Expr),
    Assign(String, Expr),
    If(Expr, Vec<Stmt>, Vec<Stmt>),
    While(Expr, Vec<Stmt>),
    Return(Option<Expr>),
    Expr(Expr),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stmt {
    pub pos: Pos,
    pub kind: StmtKind,
}

/// A function declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FnDecl {
    pub name: String,
    /// Position of the `fn` keyword.
    pub pos: Pos,
    pub params: Vec<(String, Pos)>,
    pub body: Vec<Stmt>,
    /// Position of the closing `}`.
    pub end: Pos,
}

/// A whole script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    pub functions: Vec<FnDecl>,
}

/// Deepest nesting of blocks and expressions accepted; the parser and code generator
/// recurse, so this bounds their stack use.
const MAX_NESTING: usize = 200;

struct Parser<'a> {
    file: &'a str,
    toks: &'a [Token],
    at: usize,
    nesting: usize,
}

/// Parses the tokens of `file` (as produced by [`super::lexer::lex`]).
pub fn parse(file: &str, toks: &[Token]) -> Result<Program, ScriptError> {
    let mut p = Parser {
        file,
        toks,
        at: 0,
        nesting: 0,
    };
    let mut functions = Vec::new();
    while p.peek().tok != Tok::Eof {
        functions.push(p.function()?);
    }
    Ok(Program { functions })
}

impl Parser<'_> {
    fn peek(&self) -> &Token {
        // The lexer always ends the list with Eof, and `bump` never moves past it.
        &self.toks[self.at.min(self.toks.len() - 1)]
    }

    fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if t.tok != Tok::Eof {
            self.at += 1;
        }
        t
    }

    fn error<T>(&self, pos: Pos, msg: String) -> Result<T, ScriptError> {
        Err(ScriptError::new(self.file, pos, msg))
    }

    fn expect(&mut self, want: Tok, context: &str) -> Result<Token, ScriptError> {
        let t = self.peek().clone();
        if t.tok == want {
            return Ok(self.bump());
        }
        self.error(
            t.pos,
            format!(
                "expected {} {context}, found {}",
                want.describe(),
                t.tok.describe()
            ),
        )
    }

    fn name(&mut self, context: &str) -> Result<(String, Pos), ScriptError> {
        let t = self.bump();
        match t.tok {
            Tok::Ident(name) => Ok((name, t.pos)),
            other => self.error(
                t.pos,
                format!("expected a name {context}, found {}", other.describe()),
            ),
        }
    }

    fn function(&mut self) -> Result<FnDecl, ScriptError> {
        let kw = self.peek().clone();
        if kw.tok != Tok::Fn {
            return self.error(
                kw.pos,
                format!(
                    "expected `fn` to start a function, found {} (statements go inside functions)",
                    kw.tok.describe()
                ),
            );
        }
        self.bump();
        let (name, _) = self.name("after `fn`")?;
        self.expect(Tok::LParen, &format!("after the function name `{name}`"))?;
        let mut params = Vec::new();
        if self.peek().tok != Tok::RParen {
            loop {
                params.push(self.name("for a parameter")?);
                if self.peek().tok == Tok::Comma {
                    self.bump();
                } else {
                    break;
                }
            }
        }
        self.expect(Tok::RParen, "to close the parameter list")?;
        let (body, end) = self.block(&format!("of function `{name}`"))?;
        Ok(FnDecl {
            name,
            pos: kw.pos,
            params,
            body,
            end,
        })
    }

    /// `{ statement* }`; returns the statements and the position of the `}`.
    /// Runs `f` one nesting level deeper, refusing to go past [`MAX_NESTING`].
    fn nested<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, ScriptError>,
    ) -> Result<T, ScriptError> {
        if self.nesting >= MAX_NESTING {
            return self.error(
                self.peek().pos,
                format!("blocks or expressions are nested more than {MAX_NESTING} levels deep"),
            );
        }
        self.nesting += 1;
        let r = f(self);
        self.nesting -= 1;
        r
    }

    fn block(&mut self, what: &str) -> Result<(Vec<Stmt>, Pos), ScriptError> {
        self.nested(|p| p.block_inner(what))
    }

    fn block_inner(&mut self, what: &str) -> Result<(Vec<Stmt>, Pos), ScriptError> {
        self.expect(Tok::LBrace, &format!("to start the body {what}"))?;
        let mut stmts = Vec::new();
        loop {
            let t = self.peek().clone();
            match t.tok {
                Tok::RBrace => {
                    self.bump();
                    return Ok((stmts, t.pos));
                }
                Tok::Eof => {
                    return self.error(
                        t.pos,
                        format!("the body {what} is not closed: expected `}}`"),
                    )
                }
                _ => stmts.push(self.statement()?),
            }
        }
    }

    fn statement(&mut self) -> Result<Stmt, ScriptError> {
        let t = self.peek().clone();
        let pos = t.pos;
        let kind = match t.tok {
            Tok::Let => {
                self.bump();
                let (name, _) = self.name("after `let`")?;
                self.expect(Tok::Assign, &format!("after `let {name}`"))?;
                let e = self.expr()?;
                self.expect(Tok::Semi, "after the `let` statement")?;
                StmtKind::Let(name, e)
            }
            Tok::If => return self.if_statement(),
            Tok::While => {
                self.bump();
                let cond = self.expr()?;
                let (body, _) = self.block("of `while`")?;
                StmtKind::While(cond, body)
            }
            Tok::Return => {
                self.bump();
                let value = if self.peek().tok == Tok::Semi {
                    None
                } else {
                    Some(self.expr()?)
                };
                self.expect(Tok::Semi, "after the `return` statement")?;
                StmtKind::Return(value)
            }
            Tok::Ident(ref name)
                if self.toks.get(self.at + 1).map(|t| &t.tok) == Some(&Tok::Assign) =>
            {
                let name = name.clone();
                self.bump();
                self.bump();
                let e = self.expr()?;
                self.expect(Tok::Semi, "after the assignment")?;
                StmtKind::Assign(name, e)
            }
            _ => {
                let e = self.expr()?;
                self.expect(Tok::Semi, "after the expression")?;
                StmtKind::Expr(e)
            }
        };
        Ok(Stmt { pos, kind })
    }

    fn if_statement(&mut self) -> Result<Stmt, ScriptError> {
        let pos = self.expect(Tok::If, "")?.pos;
        let cond = self.expr()?;
        let (then, _) = self.block("of `if`")?;
        let mut otherwise = Vec::new();
        if self.peek().tok == Tok::Else {
            self.bump();
            if self.peek().tok == Tok::If {
                otherwise.push(self.if_statement()?);
            } else {
                otherwise = self.block("of `else`")?.0;
            }
        }
        Ok(Stmt {
            pos,
            kind: StmtKind::If(cond, then, otherwise),
        })
    }

    fn expr(&mut self) -> Result<Expr, ScriptError> {
        let lhs = self.sum()?;
        let op = match self.peek().tok {
            Tok::Lt => BinOp::Lt,
            Tok::Le => BinOp::Le,
            Tok::Gt => BinOp::Gt,
            Tok::Ge => BinOp::Ge,
            Tok::EqEq => BinOp::Eq,
            Tok::Ne => BinOp::Ne,
            _ => return Ok(lhs),
        };
        let op_pos = self.bump().pos;
        let rhs = self.sum()?;
        if matches!(
            self.peek().tok,
            Tok::Lt | Tok::Le | Tok::Gt | Tok::Ge | Tok::EqEq | Tok::Ne
        ) {
            return self.error(
                self.peek().pos,
                "comparisons cannot be chained: use parentheses".into(),
            );
        }
        Ok(Expr {
            pos: op_pos,
            kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
        })
    }

    fn sum(&mut self) -> Result<Expr, ScriptError> {
        let mut lhs = self.product()?;
        loop {
            let op = match self.peek().tok {
                Tok::Plus => BinOp::Add,
                Tok::Minus => BinOp::Sub,
                _ => return Ok(lhs),
            };
            let pos = self.bump().pos;
            let rhs = self.product()?;
            lhs = Expr {
                pos,
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
            };
        }
    }

    fn product(&mut self) -> Result<Expr, ScriptError> {
        let mut lhs = self.unary()?;
        loop {
            let op = match self.peek().tok {
                Tok::Star => BinOp::Mul,
                Tok::Slash => BinOp::Div,
                Tok::Percent => BinOp::Rem,
                _ => return Ok(lhs),
            };
            let pos = self.bump().pos;
            let rhs = self.unary()?;
            lhs = Expr {
                pos,
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
            };
        }
    }

    fn unary(&mut self) -> Result<Expr, ScriptError> {
        self.nested(Self::unary_inner)
    }

    fn unary_inner(&mut self) -> Result<Expr, ScriptError> {
        let t = self.bump();
        let pos = t.pos;
        let kind = match t.tok {
            Tok::Minus => ExprKind::Neg(Box::new(self.unary()?)),
            Tok::Int(n) => ExprKind::Int(n),
            Tok::LParen => {
                let e = self.expr()?;
                self.expect(Tok::RParen, "to close the parenthesis")?;
                return Ok(e);
            }
            Tok::Ident(name) => {
                if self.peek().tok != Tok::LParen {
                    ExprKind::Var(name)
                } else {
                    self.bump();
                    let mut args = Vec::new();
                    if self.peek().tok != Tok::RParen {
                        loop {
                            args.push(self.expr()?);
                            if self.peek().tok == Tok::Comma {
                                self.bump();
                            } else {
                                break;
                            }
                        }
                    }
                    self.expect(Tok::RParen, &format!("to close the call of `{name}`"))?;
                    ExprKind::Call(name, args)
                }
            }
            other => {
                return self.error(
                    pos,
                    format!("expected an expression, found {}", other.describe()),
                )
            }
        };
        Ok(Expr { pos, kind })
    }
}

#[cfg(test)]
mod tests {
    use super::super::lexer::lex;
    use super::*;

    fn parse_src(src: &str) -> Result<Program, ScriptError> {
        parse("t.jg", &lex("t.jg", src)?)
    }

    fn err(src: &str) -> String {
        parse_src(src).unwrap_err().to_string()
    }

    #[test]
    fn parses_every_construct() {
        let p = parse_src(
            "fn f(a, b) {\n let x = -a + b * (2 - 1) % 3;\n x = x / 2;\n if x < 1 { return; } else if x >= 2 { g(); } else { }\n while x != 0 { x = x - 1; }\n return x == b;\n}\nfn g() { return 1; }",
        )
        .unwrap();
        assert_eq!(p.functions.len(), 2);
        let f = &p.functions[0];
        assert_eq!(f.params.len(), 2);
        assert_eq!(f.body.len(), 5);
        assert_eq!(f.end, Pos { line: 7, col: 1 });
        assert_eq!(f.body[2].pos, Pos { line: 4, col: 2 });
        // Precedence: -a + ((b * (2 - 1)) % 3).
        let StmtKind::Let(_, e) = &f.body[0].kind else {
            panic!("{:?}", f.body[0])
        };
        let ExprKind::Binary(BinOp::Add, l, r) = &e.kind else {
            panic!("{e:?}")
        };
        assert!(matches!(l.kind, ExprKind::Neg(_)));
        assert!(matches!(r.kind, ExprKind::Binary(BinOp::Rem, _, _)));
        let StmtKind::If(_, _, otherwise) = &f.body[2].kind else {
            panic!()
        };
        assert!(matches!(otherwise[0].kind, StmtKind::If(..)));
    }

    #[test]
    fn errors_say_where_and_what() {
        assert_eq!(
            err("fn f( { }"),
            "t.jg:1:7: expected a name for a parameter, found `{`"
        );
        assert_eq!(
            err("fn f() {\n  return 1\n}"),
            "t.jg:3:1: expected `;` after the `return` statement, found `}`"
        );
        assert_eq!(
            err("fn f() {\n  let x = ;\n}"),
            "t.jg:2:11: expected an expression, found `;`"
        );
        assert_eq!(
            err("let x = 1;"),
            "t.jg:1:1: expected `fn` to start a function, found `let` (statements go inside functions)"
        );
        assert_eq!(
            err("fn f() { return 1 < 2 < 3; }"),
            "t.jg:1:23: comparisons cannot be chained: use parentheses"
        );
        assert_eq!(
            err("fn f() {\n  if 1 { return 2; }\n"),
            "t.jg:3:1: the body of function `f` is not closed: expected `}`"
        );
        assert_eq!(
            err("fn f() { g(1, 2; }"),
            "t.jg:1:16: expected `)` to close the call of `g`, found `;`"
        );
        let deep = format!(
            "fn f() {{ return {}1{}; }}",
            "(".repeat(500),
            ")".repeat(500)
        );
        assert!(
            err(&deep).ends_with("nested more than 200 levels deep"),
            "{}",
            err(&deep)
        );
        let deep = format!("fn f() {{ return {}1; }}", "-".repeat(100_000));
        assert!(err(&deep).contains("nested more than"));
    }
}
