# Runs one command of a shell session and saves the session's state for the next one.
# Called as: bash -c "<this script>" bash COMMAND STATE_DIR START_DIR physical|logical MARKER [VAR...]
# or, started ahead of time, as: bash -c "<this script>" bash --wait-for-command (or forked by a
# zygote, below) and then handed the same five values on fd 3 as one text: five words in bash's
# ANSI-C quoting ($'...', printable ASCII only, see `job::hand_over_text`), ended by sandboxd
# closing the pipe. MARKER is exported as AGENTBOX_SHELL_JOB, so that sandboxd finds every
# program the command starts (see procs.rs).
# COMMAND arrives as data ($1) and is only ever given to `eval`, exactly as typed at a prompt.
# Everything here uses `builtin` (and `[[`, a keyword) so that functions the user defines cannot
# change its meaning.
#
# Everything that does not depend on the command (parsing the functions below, listing the
# variables of a fresh bash) comes first, so a bash started ahead of time or forked by a zygote
# has done it before the command arrives: after the hand-over it runs functions already parsed
# and a few short top-level lines. Two steps stay at the top level, outside any function:
# sourcing the saved environment and the command itself, because `declare` inside a function
# makes locals.

# Every variable name, without forking (`compgen -v` would need a subshell): each `${!X@}`
# lists the names starting with X.
__agentbox_names() { __agentbox_list=" ${!a@} ${!b@} ${!c@} ${!d@} ${!e@} ${!f@} ${!g@} ${!h@} ${!i@} ${!j@} ${!k@} ${!l@} ${!m@} ${!n@} ${!o@} ${!p@} ${!q@} ${!r@} ${!s@} ${!t@} ${!u@} ${!v@} ${!w@} ${!x@} ${!y@} ${!z@} ${!A@} ${!B@} ${!C@} ${!D@} ${!E@} ${!F@} ${!G@} ${!H@} ${!I@} ${!J@} ${!K@} ${!L@} ${!M@} ${!N@} ${!O@} ${!P@} ${!Q@} ${!R@} ${!S@} ${!T@} ${!U@} ${!V@} ${!W@} ${!X@} ${!Y@} ${!Z@} ${!_@} "; }

# Variables every fresh bash has (including the inherited environment): never saved.
__agentbox_names
builtin declare -A __agentbox_fresh
for __agentbox_name in $__agentbox_list; do __agentbox_fresh[$__agentbox_name]=1; done
builtin unset __agentbox_name __agentbox_list

# The first steps once the five values are $1..$5.
__agentbox_prepare() {
  # SIGINT (the bash API's `kill` with SIGINT, like Ctrl-C) ends the command with status 130, as
  # at a prompt; without this trap bash would die of the signal after the exit trap had already
  # reported the status of the last command that finished. Set before anything of the session is
  # restored and before the exit trap, so an interrupt that arrives while the command is being
  # set up ends it with 130 too (and, before the exit trap, leaves the session's state as it was).
  builtin trap 'builtin exit 130' INT
  __agentbox_state=$2
  __agentbox_mode=$4
  __agentbox_marker=$5
}

# After the saved environment (which holds the previous command's marker): this command's
# marker, its directory, its own variables and the exit trap. Called with the command's
# arguments.
__agentbox_enter() {
  builtin export AGENTBOX_SHELL_JOB="$5"
  __agentbox_oldpwd=${OLDPWD-}
  if [[ $__agentbox_mode = physical ]]; then
    # Symlinks in paths are resolved: `cd link; pwd` shows where it really is.
    builtin set -o physical
    builtin cd -P -- "$3" || builtin exit 1
  else
    builtin cd -L -- "$3" || builtin exit 1
  fi
  if [[ -n $__agentbox_oldpwd ]]; then OLDPWD=$__agentbox_oldpwd; fi
  builtin unset __agentbox_oldpwd

  # Variables for this command only (the bash pipe API's `env`): after the five values, each
  # VAR is NAME=VALUE (set and export) or NAME (unset); sandboxd checked that every NAME is an
  # identifier. The exit trap puts the previous values back before the session is saved.
  __agentbox_env_names=() __agentbox_env_prev=()
  for __agentbox_e in "${@:6}"; do
    __agentbox_n=${__agentbox_e%%=*}
    __agentbox_env_names+=("$__agentbox_n")
    if [[ -v $__agentbox_n ]]; then
      __agentbox_env_prev+=("$(builtin declare -p -- "$__agentbox_n" 2>/dev/null)")
    else
      __agentbox_env_prev+=("")
    fi
    if [[ $__agentbox_e == *=* ]]; then
      builtin export -- "$__agentbox_n=${__agentbox_e#*=}"
    else
      builtin unset -- "$__agentbox_n"
    fi
  done
  builtin unset __agentbox_e __agentbox_n

  # `set +x` first, with its own trace silenced, so a command that enabled tracing does not trace
  # the report and the saving.
  builtin trap '{ __agentbox_status=$?; builtin set +o xtrace +o errexit +o nounset; } 2>/dev/null; __agentbox_done; __agentbox_restore; __agentbox_save "$__agentbox_state" "$__agentbox_mode" "$__agentbox_status"' EXIT
}

# Reports the end of the command to sandboxd, before the slower saving: the marker, the exit
# status and the working directory, each NUL-terminated, on the session's `done` FIFO (opened
# read-write, which never blocks). sandboxd answers from this while the state is being saved.
# With symlinks resolved the directory field is empty and sandboxd reads the directory from
# /proc (what `pwd -P` would print, without a lookup of every component), so the report is one
# write.
__agentbox_done() {
  if [[ $__agentbox_mode = physical ]]; then
    builtin printf '%s\0%s\0\0' "$__agentbox_marker" "$__agentbox_status" 1<>"$__agentbox_state/done" 2>/dev/null
  else
    {
      builtin printf '%s\0%s\0' "$__agentbox_marker" "$__agentbox_status"
      builtin pwd -L
      builtin printf '\0'
    } 1<>"$__agentbox_state/done" 2>/dev/null
  fi
}

# Puts back the variables this command had for itself only (see above), as they were before.
__agentbox_restore() {
  builtin local __agentbox_i
  for __agentbox_i in "${!__agentbox_env_names[@]}"; do
    builtin unset -- "${__agentbox_env_names[__agentbox_i]}" 2>/dev/null
    if [[ -n ${__agentbox_env_prev[__agentbox_i]} ]]; then
      builtin eval -- "${__agentbox_env_prev[__agentbox_i]/#declare /declare -g }" 2>/dev/null
    fi
  done
}

# Writes the exported environment, the variables and functions the session defined, and the
# working directory, for sandboxd to pick up once the command has finished; then ends bash with
# the command's status. Called as __agentbox_save STATE_DIR MODE STATUS, the last thing before
# bash exits, so it may unset what it does not save: the variables every fresh bash has go
# first, at once (namerefs by themselves: `unset -v` would unset what they point at), which
# leaves a few names to go through one by one instead of every variable. One `declare -p` for
# the names kept and one redirection for the whole file: per-name calls, each with its own
# redirection, cost milliseconds.
__agentbox_save() {
  builtin set +o errexit +o nounset +o verbose +o noglob
  if [[ $2 = physical ]]; then
    builtin pwd -P >"$1/cwd.next"
  else
    builtin pwd -L >"$1/cwd.next"
  fi
  {
    builtin export -p
    builtin unset -n -- "${!__agentbox_fresh[@]}"
    builtin unset -v -- "${!__agentbox_fresh[@]}"
    builtin local IFS=$' \t\n' __agentbox_name
    builtin local -a __agentbox_keep
    __agentbox_names
    for __agentbox_name in $__agentbox_list; do
      case $__agentbox_name in
        __agentbox_* | BASH* | COMP_* | _ | PWD | OLDPWD | FUNCNAME | PIPESTATUS | GROUPS | DIRSTACK | COLUMNS | LINES) continue ;;
      esac
      # Fresh names still here could not be unset (readonly ones).
      [[ -n ${__agentbox_fresh[$__agentbox_name]-} ]] || __agentbox_keep+=("$__agentbox_name")
    done
    # The wrapper's own functions are defined anew by the next command's wrapper. (bash runs a
    # copy of a function's body, so this one may unset itself.)
    builtin unset -f __agentbox_names __agentbox_prepare __agentbox_enter __agentbox_done __agentbox_restore __agentbox_save
    if [[ ${#__agentbox_keep[@]} -gt 0 ]]; then
      builtin declare -p -- "${__agentbox_keep[@]}"
    fi
    builtin declare -f
  } >"$1/env.next" 2>/dev/null
  builtin exit "$3"
}

# A zygote (see zygote.rs), started in the shell's state root as: bash -c "<this script>" bash
# --zygote BUILTIN_SO. It reads requests on fd 0, each the name of a directory in its working
# directory holding three FIFOs (args, in, out), NUL-terminated, and forks (the agentbox_fork
# builtin) a new bash per request, which opens the FIFOs by that relative name (no lookup from
# `/`) as its fd 3, stdin and stdout/stderr, reports DIR and its pid on fd 1 (each
# NUL-terminated; DIR and "-" if the fork failed), and goes on below as a bash waiting for its
# command.
if [[ $# -eq 2 && $1 = --zygote ]]; then
  builtin enable -f "$2" agentbox_fork || builtin exit 1
  __agentbox_zygote=$$
  while IFS= builtin read -r -d '' __agentbox_dir; do
    if ! agentbox_fork; then
      builtin printf '%s\0-\0' "$__agentbox_dir"
      continue
    fi
    if [[ $$ != "$__agentbox_zygote" ]]; then
      # Plain `exec`: redirections of `builtin exec` last for that command only. (No function
      # can be named `exec` yet: nothing of the session has been sourced.)
      exec 3<"$__agentbox_dir/args" 0<"$__agentbox_dir/in" 4>"$__agentbox_dir/out" ||
        builtin exit 1
      builtin printf '%s\0%s\0' "$__agentbox_dir" "$$"
      exec 1>&4 2>&4 4>&-
      # Commands do not get the builtin.
      builtin enable -n agentbox_fork
      builtin unset __agentbox_dir __agentbox_zygote
      builtin set -- --wait-for-command
      break
    fi
  done
  # The zygote itself ends when sandboxd closes its fd 0.
  [[ $1 = --wait-for-command ]] || builtin exit 0
fi
if [[ $# -eq 1 && $1 = --wait-for-command ]]; then
  # One read takes the whole text (`read -N` reads a pipe in blocks; it returns 1 at the end of
  # the text, which is expected). An empty text: sandboxd closed fd 3 without a command (it is
  # stopping), so this bash ends quietly.
  IFS= builtin read -r -N 1048576 __agentbox_args <&3
  exec 3<&- # plain `exec`, as above: the command does not inherit the hand-over pipe
  [[ -n $__agentbox_args ]] || builtin exit 0
  builtin eval "builtin set -- $__agentbox_args" 2>/dev/null && [[ $# -eq 5 ]] || builtin exit 2
  builtin unset __agentbox_args
fi
__agentbox_prepare "$@"
if [[ -s $__agentbox_state/env ]]; then
  builtin . "$__agentbox_state/env" 2>/dev/null
fi
__agentbox_enter "$@"
builtin eval -- "$1"
