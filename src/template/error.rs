//! The template module's error types: what can be wrong with a template
//! ([`TemplateError`], found when a manifest is loaded or linted), with an
//! argument value ([`ArgError`], [`ValueProblem`]), and with a raw argv
//! ([`MatchError`]). Messages are lowercase, name placeholders as `{name}`,
//! and never contain an argument value: values may be secrets.

use thiserror::Error;

/// A template that cannot be used, found by parsing or by
/// [`Template::check_unambiguous`](super::Template::check_unambiguous).
///
/// Each message quotes the offending token and says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateError {
    /// The template has no tokens at all.
    #[error("empty argv template: give at least the program name, e.g. `git status`")]
    Empty,
    /// The first token is not plain, non-empty text.
    #[error(
        "first token `{token}` must name the program in plain text (no placeholder, no group); \
         start the template with the program, e.g. `git log {{ref}}`"
    )]
    ProgramNotLiteral {
        /// The first token as written.
        token: String,
    },
    /// A `[` whose group never ends.
    #[error("optional group opened at `{token}` is never closed; end its last token with `]`")]
    UnclosedGroup {
        /// The token that opened the group.
        token: String,
    },
    /// A token ending with `]` outside any group.
    #[error(
        "`{token}` closes an optional group that was never opened; begin the group with `[`, \
         or use the array form of argv for a token that really ends with `]`"
    )]
    UnopenedGroup {
        /// The token as written.
        token: String,
    },
    /// A `[` inside a group.
    #[error(
        "`{token}` opens an optional group inside another one; groups do not nest, \
         close the first group with `]` before opening the next"
    )]
    NestedGroup {
        /// The token as written.
        token: String,
    },
    /// `[]` or `[ ]`.
    #[error("optional group `{group}` is empty; remove it")]
    EmptyGroup {
        /// The group as written.
        group: String,
    },
    /// A `{` or `}` that is neither a placeholder delimiter nor doubled.
    #[error(
        "token `{token}` has an unmatched `{{` or `}}`; write `{{{{` or `}}}}` for a literal brace"
    )]
    UnmatchedBrace {
        /// The token as written.
        token: String,
    },
    /// `{}` or `{bad-name}`.
    #[error(
        "token `{token}` has an invalid placeholder `{{{name}}}`: a name matches \
         [A-Za-z_][A-Za-z0-9_]*; write `{{{{` or `}}}}` for a literal brace"
    )]
    BadPlaceholderName {
        /// The token as written.
        token: String,
        /// The text between the braces.
        name: String,
    },
    /// A group with literal tokens only (ADR vector R16).
    #[error(
        "optional group `{group}` has no placeholder, so it is always rendered; \
         drop the brackets or add a placeholder"
    )]
    LiteralOnlyGroup {
        /// The group, rendered as `[…]`.
        group: String,
    },
    /// A placeholder used both in a group and outside groups.
    #[error(
        "placeholder {{{placeholder}}} appears both inside an optional group and outside it; \
         rename one of the uses"
    )]
    PlaceholderInGroupAndOutside {
        /// The placeholder name.
        placeholder: String,
    },
    /// A placeholder used in two different groups.
    #[error(
        "placeholder {{{placeholder}}} appears in two different optional groups; \
         rename one of the uses"
    )]
    PlaceholderInTwoGroups {
        /// The placeholder name.
        placeholder: String,
    },
    /// A `pattern` that does not compile.
    #[error("pattern `{pattern}` is not a valid regular expression: {detail}")]
    BadPattern {
        /// The pattern source.
        pattern: String,
        /// What the regex parser said.
        detail: String,
    },
    /// A group whose first token starts with a placeholder.
    #[error(
        "optional group `{group}` must begin with literal text (e.g. `--limit` or \
         `--since={{since}}`), but its first token `{token}` begins with a placeholder"
    )]
    GroupWithoutLeadingLiteral {
        /// The group, rendered as `[…]`.
        group: String,
        /// Its first token.
        token: String,
    },
    /// `{a}{b}` inside one token.
    #[error(
        "token `{token}` has {{{first}}} directly followed by {{{second}}}, so the boundary \
         between them is ambiguous; put literal text between them"
    )]
    AdjacentPlaceholders {
        /// The token, rendered.
        token: String,
        /// The first placeholder.
        first: String,
        /// The placeholder that follows it.
        second: String,
    },
    /// A placeholder that could contain the literal that follows it.
    #[error(
        "in token `{token}`, {{{placeholder}}} is followed by `{literal}` but could itself \
         contain it, so the split is ambiguous; give {{{placeholder}}} a `pattern` that cannot \
         produce some character of `{literal}`, or a list of `values`"
    )]
    UnrestrictedPlaceholder {
        /// The token, rendered.
        token: String,
        /// The placeholder.
        placeholder: String,
        /// The literal text after it.
        literal: String,
    },
    /// Two allowed values that could both be followed by the literal.
    #[error(
        "in token `{token}`, two of the `values` of {{{placeholder}}} can both be followed by \
         `{literal}` (one extends the other by a start of `{literal}`), so the split is \
         ambiguous; change the values or the literal"
    )]
    AmbiguousValues {
        /// The token, rendered.
        token: String,
        /// The placeholder.
        placeholder: String,
        /// The literal text after it.
        literal: String,
    },
    /// An optional group whose first token could be confused with what
    /// follows when the group is left out.
    #[error(
        "optional group starting with `{group_token}` is ambiguous: when it is left out, \
         `{other_token}` comes in its place and could look the same; make their leading \
         literals differ so that neither is a prefix of the other, or, if `{other_token}` \
         starts with a placeholder, start the group with `-` and keep `allow_dash` off for \
         that placeholder, or give it `values` that share no prefix with the group's literal"
    )]
    GroupNotDisjoint {
        /// The group's first token, rendered.
        group_token: String,
        /// The token that can take its place.
        other_token: String,
    },
    /// A `default` that fails the placeholder's own value rules.
    #[error("the `default` of {{{placeholder}}} fails its own rules ({problem}); fix the default or relax the rules")]
    BadDefault {
        /// The placeholder.
        placeholder: String,
        /// Why the default is refused.
        problem: ArgError,
    },
    /// A `values` entry that fails the placeholder's own value rules.
    #[error(
        "entry {index} of the `values` of {{{placeholder}}} fails its own rules ({problem}); \
         fix or remove the entry"
    )]
    BadValuesEntry {
        /// The placeholder.
        placeholder: String,
        /// Zero-based position in `values`.
        index: usize,
        /// Why the entry is refused.
        problem: ArgError,
    },
    /// A params entry for a name the template does not use.
    #[error(
        "params has rules for `{name}` but the template has no placeholder {{{name}}}; \
         fix the name or remove the entry"
    )]
    ParamWithoutPlaceholder {
        /// The params key.
        name: String,
    },
}

/// Why a single value was refused. Never carries the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ValueProblem {
    /// The value contains a NUL byte.
    #[error("contains a NUL byte")]
    Nul,
    /// The value is empty (or empty inside a rendered group).
    #[error("is empty")]
    Empty,
    /// The value is longer than `max_len` bytes.
    #[error("is {len} bytes long, over the limit of {max}")]
    TooLong {
        /// The value's length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The value is not one of `values`.
    #[error("is not one of the allowed values")]
    NotInValues,
    /// The value does not match `pattern` as a whole.
    #[error("does not match the declared pattern")]
    PatternMismatch,
}

/// Arguments that cannot fill a template.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ArgError {
    /// An argument whose name is not a placeholder of the template.
    #[error("unknown argument `{name}`: the template has no placeholder {{{name}}}")]
    Unknown {
        /// The argument's name.
        name: String,
    },
    /// A required placeholder without a value or default.
    #[error("placeholder {{{placeholder}}} has no value and no default")]
    Missing {
        /// The placeholder.
        placeholder: String,
    },
    /// An optional group with some placeholders filled and others not.
    #[error(
        "optional group is partly filled: {{{missing}}} is absent or empty; \
         give every placeholder of the group or none"
    )]
    PartialGroup {
        /// The first placeholder of the group that has no value.
        missing: String,
    },
    /// A value that breaks its rules.
    #[error("value for {{{placeholder}}} {problem}")]
    Invalid {
        /// The placeholder.
        placeholder: String,
        /// What is wrong with the value.
        problem: ValueProblem,
    },
    /// A value starting with `-` where it begins an argv element.
    #[error(
        "value for {{{placeholder}}} starts with `-` at the start of an argument and could be \
         read as an option; refused unless the param sets `allow_dash = true`"
    )]
    OptionInjection {
        /// The placeholder.
        placeholder: String,
    },
}

/// Why a raw argv does not match a template.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MatchError {
    /// The argv does not have the template's shape: wrong program, wrong
    /// length, a literal that differs, or a repeated placeholder with
    /// different values.
    #[error("argv does not have the shape of the template")]
    Shape,
    /// The argv has the template's shape but a value breaks its rules.
    #[error(transparent)]
    Arg(#[from] ArgError),
}
