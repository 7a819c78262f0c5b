# Runs one command of a shell session and saves the session's state for the next one.
# Called as: bash -c "<this script>" bash COMMAND STATE_DIR START_DIR physical|logical
# or, started ahead of time, as: bash -c "<this script>" bash --wait-for-command
# and then handed the same four values on fd 3, each NUL-terminated.
# COMMAND arrives as data ($1) and is only ever given to `eval`, exactly as typed at a prompt.
# Everything here uses `builtin` so that functions the user defines cannot change its meaning.
if [ $# -eq 1 ] && [ "$1" = --wait-for-command ]; then
  # sandboxd closing fd 3 without a command (it is stopping) ends this bash quietly.
  IFS= builtin read -r -d '' __agentbox_1 <&3 && IFS= builtin read -r -d '' __agentbox_2 <&3 &&
    IFS= builtin read -r -d '' __agentbox_3 <&3 && IFS= builtin read -r -d '' __agentbox_4 <&3 ||
    builtin exit 0
  builtin exec 3<&-
  builtin set -- "$__agentbox_1" "$__agentbox_2" "$__agentbox_3" "$__agentbox_4"
  builtin unset __agentbox_1 __agentbox_2 __agentbox_3 __agentbox_4
fi
__agentbox_state=$2
__agentbox_mode=$4
# Every variable name, without forking (`compgen -v` would need a subshell): each `${!X@}`
# lists the names starting with X.
__agentbox_names() { __agentbox_list=" ${!a@} ${!b@} ${!c@} ${!d@} ${!e@} ${!f@} ${!g@} ${!h@} ${!i@} ${!j@} ${!k@} ${!l@} ${!m@} ${!n@} ${!o@} ${!p@} ${!q@} ${!r@} ${!s@} ${!t@} ${!u@} ${!v@} ${!w@} ${!x@} ${!y@} ${!z@} ${!A@} ${!B@} ${!C@} ${!D@} ${!E@} ${!F@} ${!G@} ${!H@} ${!I@} ${!J@} ${!K@} ${!L@} ${!M@} ${!N@} ${!O@} ${!P@} ${!Q@} ${!R@} ${!S@} ${!T@} ${!U@} ${!V@} ${!W@} ${!X@} ${!Y@} ${!Z@} ${!_@} "; }
# Variables every fresh bash has (including the inherited environment): not saved.
__agentbox_names
__agentbox_fresh=$__agentbox_list
if [ -s "$__agentbox_state/env" ]; then
  builtin . "$__agentbox_state/env" 2>/dev/null
fi
__agentbox_oldpwd=${OLDPWD-}
if [ "$__agentbox_mode" = physical ]; then
  # Symlinks in paths are resolved: `cd link; pwd` shows where it really is.
  builtin set -o physical
  builtin cd -P -- "$3" || builtin exit 1
else
  builtin cd -L -- "$3" || builtin exit 1
fi
if [ -n "$__agentbox_oldpwd" ]; then OLDPWD=$__agentbox_oldpwd; fi
builtin unset __agentbox_oldpwd

# Writes the exported environment, the variables and functions the session defined, and the
# working directory, for sandboxd to pick up once the command has finished.
__agentbox_save() {
  builtin set +o errexit +o nounset +o verbose +o noglob
  builtin local IFS=$' \t\n' __agentbox_name
  {
    builtin export -p
    __agentbox_names
    for __agentbox_name in $__agentbox_list; do
      case $__agentbox_name in
        __agentbox_* | BASH* | COMP_* | _ | PWD | OLDPWD | FUNCNAME | PIPESTATUS | GROUPS | DIRSTACK | COLUMNS | LINES) continue ;;
      esac
      case $__agentbox_fresh in
        *" $__agentbox_name "*) continue ;;
      esac
      builtin declare -p -- "$__agentbox_name" 2>/dev/null
    done
    # Every function at once (no subshell). `__agentbox_save` comes along and is defined anew
    # after the next command loads the file; `__agentbox_names` (defined before) is left out.
    builtin unset -f __agentbox_names
    builtin declare -f
  } >"$__agentbox_state/env.next"
  if [ "$__agentbox_mode" = physical ]; then
    builtin pwd -P >"$__agentbox_state/cwd.next"
  else
    builtin pwd -L >"$__agentbox_state/cwd.next"
  fi
}
# `set +x` first, with its own trace silenced, so a command that enabled tracing does not trace
# the saving.
builtin trap '{ __agentbox_status=$?; builtin set +o xtrace; } 2>/dev/null; __agentbox_save; builtin exit "$__agentbox_status"' EXIT
builtin eval -- "$1"
