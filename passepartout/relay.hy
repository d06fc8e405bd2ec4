;; * Why

"A shell action's box has no network but its loopback device. This module makes
the one way out: a small relay inside the box that carries each connection from
a local port to the daemon's proxy socket (proxy.org), the command line that
starts it before the command, the variables that point programs at it, and the
judgment of which command lines need no way out at all."

(import functools [lru-cache]
        os shutil
        passepartout.shell.walk [analyse])

(setv PROXY-PORT 3128
      BOX-SOCKET "/run/passepartout-egress.sock")

;; * Inside the box

(setv RELAY-PERL #[[
my ($path, $port) = @ARGV;
socket(my $l, 2, 1, 0) or exit 1;
setsockopt($l, 1, 2, pack("i", 1));
bind($l, pack("S n C4 x8", 2, $port, 127, 0, 0, 1)) or exit 1;
listen($l, 64) or exit 1;
$SIG{CHLD} = "IGNORE";
my $pid = fork;
exit(defined $pid ? 0 : 1) if !defined $pid || $pid;
while (1) {
  accept(my $c, $l) or do { select(undef, undef, undef, 0.05); next };
  my $k = fork;
  if (defined $k && $k == 0) {
    close $l;
    socket(my $u, 1, 1, 0) or exit 1;
    connect($u, pack("S a*", 1, $path)) or exit 1;
    pump($c, $u);
    exit 0;
  }
  close $c;
}
sub pump {
  my @s = @_;
  my @fd = (fileno $s[0], fileno $s[1]);
  my @open = (1, 1);
  while ($open[0] || $open[1]) {
    my $rin = "";
    for my $i (0, 1) { vec($rin, $fd[$i], 1) = 1 if $open[$i] }
    my $n = select(my $r = $rin, undef, undef, undef);
    next if $n < 0 && $! == 4;
    return if $n < 0;
    for my $i (0, 1) {
      next unless $open[$i] && vec($r, $fd[$i], 1);
      my $got = sysread($s[$i], my $buf, 65536);
      if (!$got) { $open[$i] = 0; shutdown($s[1 - $i], 1); next }
      my $off = 0;
      while ($off < $got) {
        my $w = syswrite($s[1 - $i], $buf, $got - $off, $off);
        return unless $w;
        $off += $w;
      }
    }
  }
}
]]
      RELAY-PYTHON #[[
import os, select, signal, socket, sys
path, port = sys.argv[1], int(sys.argv[2])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(64)
if os.fork():
    os._exit(0)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)

def pump(a, b):
    peer = {a: b, b: a}
    reading = [a, b]
    while reading:
        for s in select.select(reading, [], [])[0]:
            data = s.recv(65536)
            if data:
                peer[s].sendall(data)
            else:
                reading.remove(s)
                peer[s].shutdown(socket.SHUT_WR)

while True:
    try:
        conn, _ = listener.accept()
    except OSError:
        continue
    if os.fork() == 0:
        listener.close()
        try:
            up = socket.socket(socket.AF_UNIX)
            up.connect(path)
            pump(conn, up)
        finally:
            os._exit(0)
    conn.close()
]])

(defn find-relay []
  "The program that runs the relay inside the box, as [kind path] (kind
   \"perl\" or \"python\"), or None when the system has neither."
  (for [[kind name] [#("perl" "perl") #("python" "python3")]]
    (setv p (shutil.which name :path "/usr/bin:/bin"))
    (when p
      (return [kind p])))
  None)

(defn relay-argv [relay [socket BOX-SOCKET] [port PROXY-PORT]]
  "The command line that starts the relay RELAY ([kind path])."
  (setv [kind path] relay)
  (if (= kind "perl")
      [path "-e" RELAY-PERL socket (str port)]
      [path "-I" "-S" "-c" RELAY-PYTHON socket (str port)]))

(setv _holder "c=$1; shift; \"$@\" </dev/null >/dev/null 2>&1; exec /bin/sh -c \"$c\"")

(defn boxed-command [cmd relay]
  "The argv that runs the shell command CMD inside the box: through /bin/sh -c,
   after the relay RELAY ([kind path], or None for none) listens."
  (if relay
      ["/bin/sh" "-c" _holder "/bin/sh" cmd #* (relay-argv relay)]
      ["/bin/sh" "-c" cmd]))

(defn proxy-env [[port PROXY-PORT]]
  "The variables that send a box's HTTP(S) traffic to the relay on PORT."
  (setv url f"http://127.0.0.1:{port}"
        local "localhost,127.0.0.1,::1")
  (dict (+ (lfor k ["HTTP_PROXY" "HTTPS_PROXY" "ALL_PROXY"] x [#(k url) #((.lower k) url)] x)
           [#("NO_PROXY" local) #("no_proxy" local)])))

;; ** Lines that never go out

(setv LOCAL-PROGRAMS #{"echo" "printf" "grep" "egrep" "fgrep" "sed" "awk" "gawk" "mawk" "tr"
                       "cut" "sort" "uniq" "wc" "head" "tail" "cat" "tac" "column" "fold" "fmt"
                       "nl" "paste" "join" "expand" "unexpand" "rev" "jq" "test" "[" "[[" "true"
                       "false" ":" "cd" "pwd" "export" "read" "printenv" "basename" "dirname"
                       "realpath" "readlink" "stat" "ls" "file" "touch" "mkdir" "rmdir" "rm" "cp"
                       "mv" "ln" "chmod" "diff" "cmp" "comm" "tee" "seq" "date" "du" "df" "expr"
                       "md5sum" "sha1sum" "sha256sum" "sha512sum" "b2sum" "cksum" "base64" "od"
                       "xxd" "hexdump" "strings" "sleep" "tree" "patch" "split" "csplit" "truncate"})

(defn [(lru-cache :maxsize 1024)] _local-only [cmd]
  (try
    (setv a (analyse cmd))
    (except [Exception]
      (return False)))
  (and (get a "commands")
       (not (or (get a "issues") (get a "overflow") (get a "too-large") (get a "stopped")))
       (all (gfor rec (get a "commands")
                  (and (not (get rec "launcher")) (not (get rec "code"))
                       (in (os.path.basename (or (get rec "name") "")) LOCAL-PROGRAMS))))))

(defn may-reach-network [cmd]
  "False when the command line CMD is made only of programs that never reach the
   network (LOCAL-PROGRAMS), so its box needs no way out; True otherwise.
   (may-reach-network \"ls -la | grep x > out\") ⇒ False"
  (not (and (isinstance cmd str) (.strip cmd) (_local-only cmd))))
