# Shared by the wrk benches (durable.sh, shipping.sh): source it after setting $work.
#   post_lua BODY   writes $work/post.lua, a POST /v1/authorize as the demo agent
#   p50 PORT        p50 latency (µs) at one connection for $DURATION seconds
#   median          the median of numbers on stdin
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }

post_lua() {
  cat > "$work/post.lua" <<LUA
wrk.method = "POST"
wrk.path = "/v1/authorize"
wrk.body = [[$1]]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer demo-dev-token"
LUA
}
to_us() { awk '{v=$1; if (v ~ /us$/) {sub(/us/,"",v); print v} else if (v ~ /ms$/) {sub(/ms/,"",v); print v*1000} else if (v ~ /s$/) {sub(/s/,"",v); print v*1000000} else print v}'; }
p50() { wrk -t1 -c1 -d"${DURATION}s" --latency -s "$work/post.lua" "http://127.0.0.1:$1" 2>&1 | awk '$1=="50%"{print $2}' | to_us; }
median() { sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
