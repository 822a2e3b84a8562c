//! Lexer of the demo language: turns script text into tokens with their positions.

use super::{Pos, ScriptError};

/// One token kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    Int(i64),
    Ident(String),
    Fn,
    Let,
    If,
    Else,
    While,
    Return,
    LParen,
    RParen,
    LBrace,
    RBrace,
    Comma,
    Semi,
    Assign,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Lt,
    Le,
    Gt,
    Ge,
    EqEq,
    Ne,
    Eof,
}

impl Tok {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        let s = match self {
            Tok::Int(n) => return format!("number `{n}`"),
            Tok::Ident(name) => return format!("name `{name}`"),
            Tok::Fn => "`fn`",
            Tok::Let => "`let`",
            Tok::If => "`if`",
            Tok::Else => "`else`",
            Tok::While => "`while`",
            Tok::Return => "`return`",
            Tok::LParen => "`(`",
            Tok::RParen => "`)`",
            Tok::LBrace => "`{`",
            Tok::RBrace => "`}`",
            Tok::Comma => "`,`",
            Tok::Semi => "`;`",
            Tok::Assign => "`=`",
            Tok::Plus => "`+`",
            Tok::Minus => "`-`",
            Tok::Star => "`*`",
            Tok::Slash => "`/`",
            Tok::Percent => "`%`",
            Tok::Lt => "`<`",
            Tok::Le => "`<=`",
            Tok::Gt => "`>`",
            Tok::Ge => "`>=`",
            Tok::EqEq => "`==`",
            Tok::Ne => "`!=`",
            Tok::Eof => "the end of the file",
        };
        s.to_string()
    }
}

/// A token and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    pub pos: Pos,
}

/// Splits `src` into tokens; the last one is always [`Tok::Eof`].
pub fn lex(file: &str, src: &str) -> Result<Vec<Token>, ScriptError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line, mut col) = (0usize, 1u32, 1u32);
    while i < chars.len() {
        let c = chars[i];
        let pos = Pos { line, col };
        // Advances over `n` characters of the current line.
        let single = |t: Tok| (t, 1usize);
        let (tok, len) = match c {
            '\n' => {
                i += 1;
                line += 1;
                col = 1;
                continue;
            }
            c if c.is_whitespace() => {
                i += 1;
                col += 1;
                continue;
            }
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '0'..='9' => {
                let start = i;
                while i < chars.len() && chars[i].is_ascii_alphanumeric() {
                    i += 1;
                }
                let text: String = chars[start..i].iter().collect();
                let value = text.parse::<i64>().map_err(|_| {
                    let why = if text.chars().all(|c| c.is_ascii_digit()) {
                        format!("number `{text}` does not fit in a signed 64-bit integer")
                    } else {
                        format!("`{text}` is not a number (only decimal digits)")
                    };
                    ScriptError::new(file, pos, why)
                })?;
                col += (i - start) as u32;
                out.push(Token {
                    tok: Tok::Int(value),
                    pos,
                });
                continue;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let text: String = chars[start..i].iter().collect();
                col += (i - start) as u32;
                let tok = match text.as_str() {
                    "fn" => Tok::Fn,
                    "let" => Tok::Let,
                    "if" => Tok::If,
                    "else" => Tok::Else,
                    "while" => Tok::While,
                    "return" => Tok::Return,
                    _ => Tok::Ident(text),
                };
                out.push(Token { tok, pos });
                continue;
            }
            '(' => single(Tok::LParen),
            ')' => single(Tok::RParen),
            '{' => single(Tok::LBrace),
            '}' => single(Tok::RBrace),
            ',' => single(Tok::Comma),
            ';' => single(Tok::Semi),
            '+' => single(Tok::Plus),
            '-' => single(Tok::Minus),
            '*' => single(Tok::Star),
            '/' => single(Tok::Slash),
            '%' => single(Tok::Percent),
            '<' | '>' | '=' | '!' => {
                let eq = chars.get(i + 1) == Some(&'=');
                match (c, eq) {
                    ('<', false) => (Tok::Lt, 1),
                    ('<', true) => (Tok::Le, 2),
                    ('>', false) => (Tok::Gt, 1),
                    ('>', true) => (Tok::Ge, 2),
                    ('=', false) => (Tok::Assign, 1),
                    ('=', true) => (Tok::EqEq, 2),
                    ('!', true) => (Tok::Ne, 2),
                    _ => {
                        return Err(ScriptError::new(
                            file,
                            pos,
                            "unexpected `!`: the only use of `!` is `!=`".into(),
                        ))
                    }
                }
            }
            other => {
                return Err(ScriptError::new(
                    file,
                    pos,
                    format!("unexpected character {other:?}"),
                ))
            }
        };
        out.push(Token { tok, pos });
        i += len;
        col += len as u32;
    }
    out.push(Token {
        tok: Tok::Eof,
        pos: Pos { line, col },
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<Tok> {
        lex("t.jg", src)
            .unwrap()
            .into_iter()
            .map(|t| t.tok)
            .collect()
    }

    #[test]
    fn tokens_and_positions() {
        let toks = lex("t.jg", "fn f(a) {\n  # note\n  return a <= 10; }").unwrap();
        assert_eq!(toks[0].tok, Tok::Fn);
        let ret = toks.iter().find(|t| t.tok == Tok::Return).unwrap();
        assert_eq!(ret.pos, Pos { line: 3, col: 3 });
        let le = toks.iter().find(|t| t.tok == Tok::Le).unwrap();
        assert_eq!(le.pos, Pos { line: 3, col: 12 });
        assert_eq!(
            kinds("a==b!=c>=d>e=f"),
            vec![
                Tok::Ident("a".into()),
                Tok::EqEq,
                Tok::Ident("b".into()),
                Tok::Ne,
                Tok::Ident("c".into()),
                Tok::Ge,
                Tok::Ident("d".into()),
                Tok::Gt,
                Tok::Ident("e".into()),
                Tok::Assign,
                Tok::Ident("f".into()),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn errors_name_file_line_col() {
        let e = lex("t.jg", "fn f() {\n  return 1 @ 2;\n}").unwrap_err();
        assert_eq!(e.to_string(), "t.jg:2:12: unexpected character '@'");
        let e = lex("t.jg", "x = 99999999999999999999;").unwrap_err();
        assert!(e.to_string().starts_with("t.jg:1:5: number `9999"), "{e}");
        let e = lex("t.jg", "x = 12ab;").unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.jg:1:5: `12ab` is not a number (only decimal digits)"
        );
        let e = lex("t.jg", "!x").unwrap_err();
        assert!(e.to_string().starts_with("t.jg:1:1: unexpected `!`"), "{e}");
    }
}
