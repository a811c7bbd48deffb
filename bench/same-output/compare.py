# Compares two bench/same-output/run.sh folders: exit 0 and "differences: 0" when the outputs
# agree apart from timings (what the refactor of issue 35 had to keep). Usage: compare.py A B
import json,re,sys,pathlib
a,b=pathlib.Path(sys.argv[1]),pathlib.Path(sys.argv[2])
VOL={"pid","wall_s","started_utc","utc_start","git_commit","mem_available_bytes","setup_s","register_s","step_avg_s","step_min_s","step_median_s"}
def mask(x,k=None):
    if isinstance(x,dict): return {kk:mask(v,kk) for kk,v in x.items()}
    if isinstance(x,list):
        if k in ("losses",): return x
        if k=="warnings": x=[w for w in x if "step times spread" not in w]
        return [mask(v,k) for v in x]
    if k in VOL: return "V"
    if isinstance(x,float): return "F"
    if isinstance(x,str) and k not in ("param_checksum",): return tmask(x)
    return x
def dr(text):
    for line in text.splitlines():
        if line.startswith("DRIVERRESULT="): return json.loads(line[13:])
    return None
def tmask(t):
    t=re.sub(r"commit [0-9a-f]+(-dirty|\+dirty)?","commit C",t)
    t=re.sub(r"pid \d+|\(\d+\)","P",t)
    t=re.sub(r"-?\d+(\.\d+)?(e[-+]\d+)?","N",t)
    t="\n".join(" ".join(l.split()) for l in t.splitlines() if "\u2588" not in l and "step times spread" not in l and not l.startswith("  ") )
    t=re.sub(r"\d{4}-\d\d-\d\dT[\d:]+Z","T",t)
    
    return t
bad=0
for fa in sorted(a.glob("*.out"),key=lambda p:int(p.stem)):
    fb=b/fa.name
    ta,tb=fa.read_text(),fb.read_text()
    ja,jb=dr(ta),dr(tb)
    if (ja is None)!=(jb is None) or (ja and mask(ja)!=mask(jb)):
        print(fa.name,"DRIVERRESULT differs"); bad+=1
        if ja and jb:
            for k in ja:
                if mask(ja.get(k),k)!=mask(jb.get(k),k): print("  key",k, str(mask(ja.get(k),k))[:300], "||", str(mask(jb.get(k),k))[:300])
    la=[l for l in tmask(ta).splitlines() if not l.startswith("DRIVERRESULT")]
    lb=[l for l in tmask(tb).splitlines() if not l.startswith("DRIVERRESULT")]
    if la!=lb:
        print(fa.name,"text differs"); bad+=1
        import difflib; print("\n".join(list(difflib.unified_diff(la,lb,lineterm=""))[:20]))
    ea=sorted(l for l in tmask((a/(fa.stem+".err")).read_text()).splitlines())
    eb=sorted(l for l in tmask((b/(fa.stem+".err")).read_text()).splitlines())
    if ea!=eb:
        print(fa.name,"stderr differs"); bad+=1
        import difflib; print("\n".join(list(difflib.unified_diff(ea,eb,lineterm=""))[:20]))
print("differences:",bad)
sys.exit(1 if bad else 0)
