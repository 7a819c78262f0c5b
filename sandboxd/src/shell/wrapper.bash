# Runs one command of a shell session and saves the session's state for the next one.
# Called as: bash -c "<this script>" bash COMMAND STATE_DIR START_DIR physical|logical MARKER
# FLAGS [VAR...]
# or, started ahead of time, as: bash -c "<this script>" bash --wait-for-command READY_DIR (or
# forked by a zygote, below) and then handed the same six values on fd 3 as one text: six words
# in bash's ANSI-C quoting ($'...', printable ASCII only, see `job::hand_over_text`), ended by
# sandboxd closing the pipe. MARKER is exported as AGENTBOX_SHELL_JOB, so that sandboxd finds
# every program the command starts (see procs.rs). FLAGS is `saved` when the session has a saved
# environment (STATE_DIR/env) to restore, else `fresh`, followed by `,here` when sandboxd has
# seen that this bash, started ahead of time, works in START_DIR already.
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
#
# Paths: on a Docker host whose storage driver is fuse-overlayfs, every lookup of a path from `/`
# is a round trip to the FUSE daemon (about 65 us; a relative lookup takes 3). So nothing here
# opens /dev/null (stderr is closed instead, `2>&-`, first among the redirections), the saved
# environment is read only when there is one, and a bash started ahead of time goes to the
# directory most commands start in (READY_DIR) while it waits, so that a command starting there
# need not `cd` (seven lookups for `cd -P`): the done report's FIFO is then its one lookup.

# Every variable name, without forking (`compgen -v` would need a subshell): each `${!X@}`
# lists the names starting with X.
__agentbox_names() { __agentbox_list=" ${!a@} ${!b@} ${!c@} ${!d@} ${!e@} ${!f@} ${!g@} ${!h@} ${!i@} ${!j@} ${!k@} ${!l@} ${!m@} ${!n@} ${!o@} ${!p@} ${!q@} ${!r@} ${!s@} ${!t@} ${!u@} ${!v@} ${!w@} ${!x@} ${!y@} ${!z@} ${!A@} ${!B@} ${!C@} ${!D@} ${!E@} ${!F@} ${!G@} ${!H@} ${!I@} ${!J@} ${!K@} ${!L@} ${!M@} ${!N@} ${!O@} ${!P@} ${!Q@} ${!R@} ${!S@} ${!T@} ${!U@} ${!V@} ${!W@} ${!X@} ${!Y@} ${!Z@} ${!_@} "; }

# Variables every fresh bash has (including the inherited environment): never saved. Saving
# unsets the ones it can at once (a readonly or special variable refuses with a message, and
# bash's first message makes it look for its translations on disk).
__agentbox_names
builtin declare -A __agentbox_fresh
builtin declare -a __agentbox_unsettable
__agentbox_unsettable=()
for __agentbox_name in $__agentbox_list; do
  __agentbox_fresh[$__agentbox_name]=1
  case $__agentbox_name in
    BASH_ARGC | BASH_ARGV | BASH_LINENO | BASH_SOURCE) ;;
    *) [[ ${!__agentbox_name@a} == *r* ]] || __agentbox_unsettable+=("$__agentbox_name") ;;
  esac
done
builtin unset __agentbox_name __agentbox_list

# The first steps once the six values are $1..$6.
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

# Whether the session has a saved environment to restore (sourced at the top level, below).
__agentbox_has_saved_env() { [[ $6 == saved* ]]; }

# After the saved environment (which holds the previous command's marker): this command's
# marker, its directory, its own variables and the exit trap. Called with the command's
# arguments.
__agentbox_enter() {
  builtin export AGENTBOX_SHELL_JOB="$5"
  __agentbox_oldpwd=${OLDPWD-}
  # Symlinks in paths are resolved: `cd link; pwd` shows where it really is.
  [[ $__agentbox_mode = physical ]] && builtin set -o physical
  if [[ $6 == *,here && $3 == "${__agentbox_ready_dir-}" ]]; then
    # Already there (see --wait-for-command below: sandboxd checked that this bash's directory
    # is the one START_DIR names), and START_DIR is what `cd -P` made PWD: `cd` would land in
    # this directory with this PWD. (PWD is set again: the saved environment holds the
    # session's last one.)
    PWD=$3
  elif [[ $__agentbox_mode = physical ]]; then
    builtin cd -P -- "$3" || builtin exit 1
  else
    builtin cd -L -- "$3" || builtin exit 1
  fi
  # A session's first command finds OLDPWD as a fresh bash has it: exported, without a value.
  if [[ -n $__agentbox_oldpwd ]]; then
    OLDPWD=$__agentbox_oldpwd
  else
    builtin unset OLDPWD
    builtin export OLDPWD
  fi
  builtin unset __agentbox_oldpwd __agentbox_ready_dir

  # Variables for this command only (the bash pipe API's `env`): after the six values, each
  # VAR is NAME=VALUE (set and export) or NAME (unset); sandboxd checked that every NAME is an
  # identifier. The exit trap puts the previous values back before the session is saved.
  __agentbox_env_names=() __agentbox_env_prev=()
  for __agentbox_e in "${@:7}"; do
    __agentbox_n=${__agentbox_e%%=*}
    __agentbox_env_names+=("$__agentbox_n")
    if [[ -v $__agentbox_n ]]; then
      __agentbox_env_prev+=("$(builtin declare -p -- "$__agentbox_n" 2>&-)")
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
  builtin trap '{ __agentbox_status=$?; builtin set +o xtrace +o errexit +o nounset; } 2>&-; __agentbox_done; __agentbox_restore; __agentbox_save "$__agentbox_state" "$__agentbox_mode" "$__agentbox_status"' EXIT
}

# Reports the end of the command to sandboxd, before the slower saving: the marker, the exit
# status and the working directory, each NUL-terminated, on the session's `done` FIFO (opened
# read-write, which never blocks). sandboxd answers from this while the state is being saved.
# With symlinks resolved the directory field is empty and sandboxd reads the directory from
# /proc (what `pwd -P` would print, without a lookup of every component), so the report is one
# write.
__agentbox_done() {
  if [[ $__agentbox_mode = physical ]]; then
    builtin printf '%s\0%s\0\0' "$__agentbox_marker" "$__agentbox_status" 2>&- 1<>"$__agentbox_state/done"
  else
    {
      builtin printf '%s\0%s\0' "$__agentbox_marker" "$__agentbox_status"
      builtin pwd -L
      builtin printf '\0'
    } 2>&- 1<>"$__agentbox_state/done"
  fi
}

# Puts back the variables this command had for itself only (see above), as they were before.
__agentbox_restore() {
  builtin local __agentbox_i
  for __agentbox_i in "${!__agentbox_env_names[@]}"; do
    builtin unset -- "${__agentbox_env_names[__agentbox_i]}" 2>&-
    if [[ -n ${__agentbox_env_prev[__agentbox_i]} ]]; then
      builtin eval -- "${__agentbox_env_prev[__agentbox_i]/#declare /declare -g }" 2>&-
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
  # The directory, for when sandboxd missed the done report. With symlinks resolved, PWD is
  # what `pwd -P` would print (which looks up every component of it again).
  if [[ $2 = physical && -o physical && $PWD == /* ]]; then
    builtin printf '%s\n' "$PWD" >"$1/cwd.next"
  elif [[ $2 = physical ]]; then
    builtin pwd -P >"$1/cwd.next"
  else
    builtin pwd -L >"$1/cwd.next"
  fi
  {
    builtin export -p
    builtin unset -n -- "${__agentbox_unsettable[@]}"
    builtin unset -v -- "${__agentbox_unsettable[@]}"
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
    builtin unset -f __agentbox_names __agentbox_prepare __agentbox_has_saved_env __agentbox_enter __agentbox_done __agentbox_restore __agentbox_save
    if [[ ${#__agentbox_keep[@]} -gt 0 ]]; then
      builtin declare -p -- "${__agentbox_keep[@]}"
    fi
    builtin declare -f
  } >"$1/env.next" 2>&-
  builtin exit "$3"
}

# A zygote (see zygote.rs), started in the shell's state root as: bash -c "<this script>" bash
# --zygote BUILTIN_SO. It reads requests on fd 0, each the name of a directory in its working
# directory holding three FIFOs (args, in, out) and a READY_DIR, both NUL-terminated, and forks
# (the agentbox_fork builtin) a new bash per request, which opens the FIFOs by that relative
# name (no lookup from `/`) as its fd 3, stdin and stdout/stderr, reports DIR and its pid on fd
# 1 (each NUL-terminated; DIR and "-" if the fork failed), and goes on below as a bash waiting
# for its command in READY_DIR.
if [[ $# -eq 2 && $1 = --zygote ]]; then
  builtin enable -f "$2" agentbox_fork || builtin exit 1
  __agentbox_zygote=$$
  while IFS= builtin read -r -d '' __agentbox_dir && IFS= builtin read -r -d '' __agentbox_ready_dir; do
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
      builtin set -- --wait-for-command "$__agentbox_ready_dir"
      builtin unset __agentbox_dir __agentbox_ready_dir __agentbox_zygote
      break
    fi
  done
  # The zygote itself ends when sandboxd closes its fd 0.
  [[ $1 = --wait-for-command ]] || builtin exit 0
fi
if [[ $# -eq 2 && $1 = --wait-for-command ]]; then
  # Waits in READY_DIR: `__agentbox_enter` skips its `cd` when the command starts there. `cd -P`
  # makes PWD what a command's `cd -P` would.
  if [[ -n $2 ]] && builtin cd -P -- "$2" 2>&-; then
    __agentbox_ready_dir=$PWD
    builtin unset OLDPWD
    builtin export OLDPWD
  fi
  # One read takes the whole text (`read -N` reads a pipe in blocks; it returns 1 at the end of
  # the text, which is expected). An empty text: sandboxd closed fd 3 without a command (it is
  # stopping), so this bash ends quietly.
  IFS= builtin read -r -N 1048576 __agentbox_args <&3
  exec 3<&- # plain `exec`, as above: the command does not inherit the hand-over pipe
  [[ -n $__agentbox_args ]] || builtin exit 0
  builtin eval "builtin set -- $__agentbox_args" 2>&- && [[ $# -eq 6 ]] || builtin exit 2
  builtin unset __agentbox_args
fi
__agentbox_prepare "$@"
if __agentbox_has_saved_env "$@"; then
  builtin . "$__agentbox_state/env" 2>&-
fi
__agentbox_enter "$@"
builtin eval -- "$1"
