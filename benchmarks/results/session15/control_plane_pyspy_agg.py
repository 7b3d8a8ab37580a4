import sys, collections, re
path = sys.argv[1]; pat = sys.argv[2:] 
leaf = collections.Counter(); incl = collections.Counter(); total = 0
idle = 0
for line in open(path):
    stack, _, n = line.rstrip().rpartition(' ')
    n = int(n); total += n
    frames = stack.split(';')
    names = [re.sub(r' \(.*?:(\d+)\)', '', f) for f in frames]
    leaf[frames[-1]] += n
    for f in set(re.sub(r':\d+\)', ')', f) for f in frames):
        incl[f] += n
print('total samples', total)
print('--- top leaves'); [print(f'{v:6d} {v/total:6.1%} {k[:150]}') for k, v in leaf.most_common(25)]
print('--- top inclusive'); [print(f'{v:6d} {v/total:6.1%} {k[:150]}') for k, v in incl.most_common(45)]
